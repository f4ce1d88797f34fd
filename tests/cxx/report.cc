#include "items.h"
#include <typeinfo>

std::string summary(const Items &items) {
  long sum = 0;
  int words = 0;
  std::string text;
  for (const auto &item : items) {
    if (auto *n = dynamic_cast<const Number *>(item.get())) {
      sum += n->value;
      Counter<long>::global().add(n->value);
    } else if (typeid(*item) == typeid(Word)) {
      words += weight(static_cast<const Word &>(*item).text);
    }
    text += item->describe() + "; ";
  }
  std::vector<long> firsts{sum, words};
  return text + "sum " + std::to_string(firsts.at(0)) + " words " + std::to_string(firsts.at(items.size() > 2 ? 1 : 5));
}
