// commands.h — the subcommands of the `posgrad` tool. Each add_* registers its options and a
// callback on the app; main.cpp runs the parser and turns posgrad::Error into a message and a
// non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

#include "train/trainer.h"

namespace posgrad::cli {

void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_sample(CLI::App& app);
void add_gradcheck(CLI::App& app);
void add_info(CLI::App& app);
void add_compare(CLI::App& app);

// Binds every TrainConfig field to a long option on `sub` (defaults shown in --help).
void bind_train_options(CLI::App* sub, train::TrainConfig& cfg);
// The value of --preset in argv (or `fallback`): presets set the defaults that flags then override.
std::string preset_from_argv(int argc, char** argv, const std::string& fallback);
void set_argv(int argc, char** argv);
int argc_saved();
char** argv_saved();

}  // namespace posgrad::cli
