// The C++ link forms program: exceptions thrown in one module and caught in another, RTTI and
// dynamic_cast across modules, templates, inline functions and guarded static locals that
// several modules instantiate (COMDAT groups), the standard library's containers and strings.
#pragma once
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct ParseError : std::runtime_error {  // thrown in parse.cc, caught in main.cc (or across a DSO)
  ParseError(const std::string &what, int at) : std::runtime_error(what), at(at) {}
  int at;
};

struct Item {
  virtual ~Item();
  virtual std::string describe() const = 0;
};
struct Number : Item {
  explicit Number(long v) : value(v) {}
  std::string describe() const override;
  long value;
};
struct Word : Item {
  explicit Word(std::string t) : text(std::move(t)) {}
  std::string describe() const override;
  std::string text;
};

using Items = std::vector<std::unique_ptr<Item>>;
Items parse(const std::vector<std::string> &tokens);  // parse.cc: throws ParseError on "!"
std::string summary(const Items &items);               // report.cc: dynamic_cast, typeid, vector::at

template <typename T>
struct Counter {
  std::map<T, int> seen;
  int add(const T &key) { return ++seen[key]; }
  static Counter &global() {  // a guarded static local in a COMDAT group, in every module that uses it
    static Counter c;
    return c;
  }
};

inline int weight(const std::string &s) { return static_cast<int>(s.size()) * 2 + 1; }

extern "C" int items_internal();  // kept out of the shared library's interface by its version script
