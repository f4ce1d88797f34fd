// A class hierarchy split across modules (shapes.cc, circle.cc, main.cc): what whole-program
// devirtualization and CFI work on. Logger has one implementation in the program (devirtualized
// to a direct call); Shape::sides() returns a constant in every class (virtual constant propagation).
#pragma once
#include <string>

struct Logger {
  virtual ~Logger();
  virtual void log(const std::string &what) = 0;
};
Logger &logger();

struct Shape {
  virtual ~Shape();
  virtual double area() const = 0;
  virtual int sides() const = 0;
  virtual std::string name() const;
};

struct Square : Shape {
  explicit Square(double s) : side(s) {}
  double area() const override;
  int sides() const override;
  std::string name() const override;
  double side;
};

struct Circle : Shape {
  explicit Circle(double r) : radius(r) {}
  double area() const override;
  int sides() const override;
  double radius;
};

// An unrelated polymorphic class: casting one to Shape is the bad cast CFI stops.
struct Account {
  virtual ~Account();
  virtual double balance() const;
  double money = 42;
};

// Indirect calls through function pointers: CFI checks them against a jump table of the
// functions of that type (cfi-icall); `other` has another type.
using Op = int (*)(int);
Op op(int which);
double other(double);

Shape *make_shape(int kind, double size);
Account *make_account();
double total_area(Shape *const *shapes, int n);
int total_sides(Shape *const *shapes, int n);
