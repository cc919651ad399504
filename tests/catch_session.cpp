// Catch2 v2's implementation (CATCH_CONFIG_RUNNER: no main of its own), compiled once for every test program; the
// mains (catch_main.cpp and the others named in catch_session.hpp) call run_catch.
#define CATCH_CONFIG_RUNNER
#include "catch_session.hpp"

#include <catch2/catch.hpp>

int safeamp_test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
