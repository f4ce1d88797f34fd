#include "shapes.h"
#include <cstdio>
#include <cstring>

int main(int argc, char **argv) {
  Shape *shapes[3] = {make_shape(0, 1), make_shape(1, 2), make_shape(0, 3)};
  logger().log("shapes made");
  std::printf("area %.1f sides %d first %s second %s\n", total_area(shapes, 3), total_sides(shapes, 3),
              shapes[0]->name().c_str(), shapes[1]->name().c_str());
  if (argc > 1 && std::strcmp(argv[1], "bad-cast") == 0) {
    Shape *wrong = reinterpret_cast<Shape *>(make_account());  // not a Shape: CFI traps here
    std::printf("wrong area %.1f\n", wrong->area());
  }
  if (argc > 1 && std::strcmp(argv[1], "good-cast") == 0) {
    Shape *right = reinterpret_cast<Shape *>(static_cast<void *>(make_shape(1, 5)));
    std::printf("right area %.1f\n", right->area());
  }
  if (argc > 1 && std::strcmp(argv[1], "bad-icall") == 0) {
    Op wrong = reinterpret_cast<Op>(&other);  // not an int(int): CFI traps here
    std::printf("wrong op %d\n", wrong(3));
  }
  std::printf("op %d\n", op(argc > 2)(7));
  for (Shape *s : shapes) delete s;
  return 0;
}
