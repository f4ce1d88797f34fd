#include "items.h"

Item::~Item() {}
std::string Number::describe() const { return "number " + std::to_string(value); }
std::string Word::describe() const { return "word " + text; }
extern "C" int items_internal() { return Counter<std::string>::global().add("internal"); }
