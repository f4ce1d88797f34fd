#include "shapes.h"
#include <cstdio>

namespace {
struct StdoutLogger : Logger {
  void log(const std::string &what) override { std::printf("log: %s\n", what.c_str()); }
};
}  // namespace

Logger::~Logger() {}
Logger &logger() { static StdoutLogger l; return l; }

Shape::~Shape() {}
std::string Shape::name() const { return "shape"; }
double Square::area() const { return side * side; }
int Square::sides() const { return 4; }
std::string Square::name() const { return "square"; }

Account::~Account() {}
double Account::balance() const { return money; }
Account *make_account() { return new Account; }

static int twice(int x) { return 2 * x; }
static int thrice(int x) { return 3 * x; }
Op op(int which) { return which ? thrice : twice; }
double other(double x) { return x / 2; }

double total_area(Shape *const *shapes, int n) {
  double t = 0;
  for (int i = 0; i < n; i++) t += shapes[i]->area();
  return t;
}
int total_sides(Shape *const *shapes, int n) {
  int t = 0;
  for (int i = 0; i < n; i++) t += shapes[i]->sides();
  return t;
}
