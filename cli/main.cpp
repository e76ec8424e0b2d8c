// main.cpp — the `posgrad` command-line tool: train, eval, sample, compare, gradcheck, info.
// Bad input of any kind ends with a one-line error naming it and exit status 1 (2 for usage).
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "tensor/errors.h"

int main(int argc, char** argv) {
  using namespace posgrad;
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  cli::set_argv(argc, argv);
  CLI::App app{"posgrad — train small transformers and compare position encodings, with real measurements"};
  app.require_subcommand(1);
  cli::add_train(app);
  cli::add_eval(app);
  cli::add_sample(app);
  cli::add_compare(app);
  cli::add_gradcheck(app);
  cli::add_info(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const train::NonFiniteLoss& e) {
    spdlog::error("{}", e.what());
    return 3;
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    spdlog::error("out of memory");
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 1;
  }
  return 0;
}
