#include "items.h"
#include <cstdio>
#include <typeinfo>

int main(int argc, char **argv) {
  std::vector<std::string> tokens(argv + 1, argv + argc);
  try {
    Items items = parse(tokens);
    std::printf("%s\n", summary(items).c_str());
  } catch (const ParseError &e) {  // thrown in parse.cc
    std::printf("parse error '%s' at %d (%s)\n", e.what(), e.at, typeid(e).name());
  } catch (const std::out_of_range &e) {  // thrown by vector::at in report.cc
    std::printf("out of range\n");
  }
  std::printf("seen %d weight %d\n", Counter<std::string>::global().add("x"), weight("abc"));
  return 0;
}
