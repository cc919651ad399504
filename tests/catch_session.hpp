// The Catch2 session of every test main (catch_main.cpp, the format tests' no-SIMD main, the device tests' main in
// cuda/device_main.cpp): Catch2 v2's implementation is compiled once, in catch_session.cpp, and each main calls it
// instead of compiling it again (about 14 s of g++ a copy).
#pragma once

namespace safeamp_test {
/// Catch::Session().run(argc, argv): runs the program's test cases with its command line; returns the exit code.
int run_catch(int argc, char* argv[]);
}  // namespace safeamp_test
