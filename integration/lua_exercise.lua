-- Exercises the interpreter built by test_lua.py; the test compares the output line by line.
local out = {}
local function emit(...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = tostring(parts[i]) end
  out[#out + 1] = table.concat(parts, " ", 1, parts.n)
end

-- strings
local s = "Hello, " .. _VERSION
emit(s:upper(), #s, s:sub(-3), s:rep(2, "|"), s:reverse())
emit(("a,b,,c"):gsub(",", ";"))
local words = {}
for w in ("the quick brown fox"):gmatch("%a+") do words[#words + 1] = w:sub(1, 1):upper() .. w:sub(2) end
emit(#words, table.concat(words, "-"), ("hello world"):find("o w"), ("key=val"):match("(%w+)=(%w+)"))
emit(string.byte("A"), string.char(76, 117, 97), utf8.len("h\u{e9}llo"), ("%d items"):format(3))

-- tables and metatables
local V = {}
V.__index = V
V.__add = function(a, b) return setmetatable({x = a.x + b.x, y = a.y + b.y}, V) end
V.__tostring = function(v) return "(" .. v.x .. "," .. v.y .. ")" end
local function vec(x, y) return setmetatable({x = x, y = y}, V) end
emit(tostring(vec(1, 2) + vec(10, 20)), rawlen({1, 2, 3}), select("#", nil, nil), next({}))
local squares, total = {}, 0
for i = 1, 1000 do squares[i] = i * i end
for _, v in ipairs(squares) do total = total + v end
emit(#squares, total)

-- closures
local function counter()
  local n = 0
  return function(k) n = n + (k or 1); return n end
end
local c1, c2 = counter(), counter()
c1(); c1(5); c2(10)
emit(c1(), c2())

-- coroutines
local fib = coroutine.wrap(function(a, b)
  for _ = 1, 5 do a, b = b, a + b; coroutine.yield(a) end
  return "done"
end)
emit(fib(0, 1), fib(), fib(), fib(), fib(), fib())
local co = coroutine.create(function(x)
  local y = coroutine.yield(x * 2)
  error({code = y})
end)
local ok1, v1 = coroutine.resume(co, 21)
local ok2, e2 = coroutine.resume(co, 7)
emit(ok1, v1, ok2, e2.code, coroutine.status(co))

-- pcall / error
local ok3, e3 = pcall(error, "boom", 0)
local ok4, e4 = pcall(function() local t = nil; return t.x end)
local ok5, e5 = xpcall(function() error("deep", 0) end, function(m) return "handled: " .. m end)
emit(ok3, e3, ok4, e4:match("attempt to index a nil value %(local 't'%)") ~= nil, ok5, e5)
emit(pcall(function() return 1, 2 end))

-- string.format and math
emit(string.format("[%5.2f|%-5d|%x|%05.1f|%s|%g|%q]", math.pi, 42, 255, 2.71828, true, 1e20, "q"))
emit(math.floor(-3.5), math.max(3, 9, 2), 7 // 2, 7 % -3, 2 ^ 10, math.tointeger(3.0), math.fmod(7, 3))
emit(math.type(1), math.type(1.0), math.type("1"), math.maxinteger + 1 == math.mininteger, math.sqrt(16),
     string.format("%.3f", math.sin(math.pi / 6)), 10 / 4, 3 | 5, 6 & 3, 1 << 10, ~0)

-- sorting: table.sort and a hand-written quicksort over the same pseudo-random numbers
local xs, x = {}, 12345
for i = 1, 50 do
  x = (x * 1103515245 + 12345) % 2147483648
  xs[i] = x % 1000
end
local function quicksort(t, lo, hi)
  if lo >= hi then return end
  local p, i = t[hi], lo
  for j = lo, hi - 1 do
    if t[j] < p then t[i], t[j] = t[j], t[i]; i = i + 1 end
  end
  t[i], t[hi] = t[hi], t[i]
  quicksort(t, lo, i - 1)
  quicksort(t, i + 1, hi)
end
local a, b, sum = table.move(xs, 1, #xs, 1, {}), table.move(xs, 1, #xs, 1, {}), 0
quicksort(a, 1, #a)
table.sort(b, function(p, q) return p > q end)
local same = true
for i = 1, #a do
  same = same and a[i] == b[#b + 1 - i]
  sum = sum + a[i] * i
end
emit(same, table.concat(a, ",", 1, 8), b[1], sum)
local names = {"pear", "fig", "banana", "kiwi", "apple", "date"}
table.sort(names, function(p, q) if #p ~= #q then return #p < #q end return p < q end)
emit(table.concat(names, " "))

print(table.concat(out, "\n"))
