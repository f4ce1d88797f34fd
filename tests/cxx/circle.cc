#include "shapes.h"

double Circle::area() const { return 3.0 * radius * radius; }
int Circle::sides() const { return 0; }

Shape *make_shape(int kind, double size) {
  if (kind == 0) return new Circle(size);
  return new Square(size);
}
