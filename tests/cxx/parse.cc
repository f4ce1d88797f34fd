#include "items.h"
#include <cctype>

Items parse(const std::vector<std::string> &tokens) {
  Items out;
  for (size_t i = 0; i < tokens.size(); i++) {
    const std::string &t = tokens[i];
    Counter<std::string>::global().add(t);
    if (t == "!") throw ParseError("bang", static_cast<int>(i));
    if (!t.empty() && std::isdigit(static_cast<unsigned char>(t[0])))
      out.push_back(std::make_unique<Number>(std::stol(t)));
    else
      out.push_back(std::make_unique<Word>(t));
  }
  return out;
}
