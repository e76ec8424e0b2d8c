// compare.h — the comparison experiment: the same GPT trained with each position encoding on
// identical data order, initialisation seed and hyperparameters, then measured: validation
// perplexity and next-token accuracy, perplexity at 1x..16x the training length on the same
// validation text, per-position loss inside a long window, RoPE with linear / dynamic-NTK / YaRN
// scaling as extra rows, RoPE scaled and fine-tuned at 2x / 4x the training length (the position
// interpolation protocol, compare/studies/pi/pi_protocol.h), training speed and memory, attention weight versus
// query-key distance, and a synthetic copy/reverse task (exact match and token F1 at 1x..4x its training length).
// Each (method, seed) lives in its own run directory with a result.json; an interrupted
// experiment resumes (finished units are skipped, a half-trained one continues from its checkpoint).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/compare_dist.h"
#include "compare/config.h"
#include "compare/results.h"
#include "dist/communicator.h"

namespace posgrad::train {

CompareConfig compare_preset(const std::string& name);  // quick | full | tiny; ValueError otherwise
const std::vector<std::string>& compare_preset_names();

// Runs (or resumes) every unit, then the cost benchmark, writes results.json (the typed
// ComparisonResult, compare/results.h) and renders report.md, results.csv, cost.csv and the plots
// from it (compare/report.h) into cfg.out_dir. Returns the path of report.md.
// With a communicator of several processes (null: dist::world()), the units are shared among them
// (compare/compare_dist.h) and rank 0 alone runs the cost benchmark and writes the reports; the other
// ranks return "" once their units are sent.
std::string run_compare(const CompareConfig& cfg, dist::Communicator* comm = nullptr);
// Every unit run_compare distributes, in order: the decoder units (for each seed, each method; none
// for --track encoder), then the units of each enabled study that trains its own models
// (StudyEntry::own_units: the encoder track's (method, seed) units).
std::vector<UnitSpec> experiment_units(const CompareConfig& cfg);
// How many of a process's units run at once (--jobs) and with how many OpenMP threads each, for a job
// of `processes` processes: --jobs N as given (at most `units`); --jobs 0 one job per thread of
// --threads (0: the process's OpenMP setting) with --device cpu and one process, fewer when the
// largest unit's memory estimate (train/options.h) times the jobs would exceed this machine's memory,
// else one. Each job gets threads / jobs threads (at least 1); one job keeps the process's setting.
LocalJobs compare_jobs(const CompareConfig& cfg, int processes, size_t units);

// A re-run resumes the experiment in cfg.out_dir: UsageError naming every option whose value differs
// from the finished units' (decoder options against decoder units, --encoder-* against encoder units;
// methods and seeds may only grow, a track may only be added, the corpus must be the one recorded
// in corpus.json); IoError when compare_config.json there is unreadable.
// Nothing when the directory holds no finished unit. run_compare and --dry-run call it.
void check_same_experiment(const CompareConfig& cfg);
// A finished unit's result.json read back and checked: its folder's method and seed, the settings'
// rows (check_unit), and its own config.json against the experiment's settings. IoError (damaged,
// copied or edited: delete it to measure again) or UsageError (trained with other settings).
UnitResult load_kept_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed);
// load_kept_unit for every unit of cfg that has a result.json: a damaged one is found before any new
// unit trains (run_compare and --dry-run).
void check_kept_units(const CompareConfig& cfg);
// The checks that need the corpus (loaded and tokenised, nothing trained): the decoder's short-corpus
// refusal at --block-size, the passkey template's symbols in the vocabulary (check_passkey_data), the
// position-interpolation windows (check_pi_data) and the encoder track's sizes (check_encoder_data:
// UsageError naming the --encoder-* options). IoError for an unreadable corpus, ValueError otherwise.
// run_compare (before writing anything) and --dry-run call it, so both refuse the same cases.
void check_compare_data(const CompareConfig& cfg);

}  // namespace posgrad::train
