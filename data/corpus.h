// corpus.h — where the training text comes from: a file path, or one of two named corpora.
//   "kjv"          the King James Bible, extracted offline from Debian's bible-kjv package by
//                  scripts/extract_kjv.sh to default_data_home()/kjv.txt (the default corpus);
//   "shakespeare"  tinyshakespeare.txt (Karpathy's char-rnn corpus) inside a data directory, never
//                  committed to the repository (also accepted: "tinyshakespeare").
// Anything else is a path. The names win over a file of the same name in the current directory
// (write ./kjv to mean the file). Deliberately not here: downloading, decompression, tokenisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace posgrad::data {

// ${POSGRAD_HOME} if set and non-empty, else $HOME/.local/share/posgrad.
std::string default_data_home();
// The directory "shakespeare" is looked up in: `flag` if non-empty, else $POSGRAD_DATA_DIR if set
// and non-empty, else "../shared/data" (relative to the current directory).
std::string resolve_data_dir(const std::string& flag);
// The file a corpus spec names ("kjv" and "shakespeare" resolved, any other spec returned as is).
std::string corpus_path(const std::string& spec, const std::string& data_dir = "");

// The bytes of the corpus. IoError (naming the path, and for the named corpora how to get them)
// when the file is missing, unreadable, not a regular file (a directory, device, FIFO or socket:
// symbolic links are followed), empty, or larger than max_bytes (checked before reading).
std::string load_corpus(const std::string& spec, const std::string& data_dir = "",
                        int64_t max_bytes = int64_t{1} << 30);

// ---- provenance: which file a model was trained on, so that a later evaluation reads the same text --------
// {"path": the absolute, normalised path of the file `spec` names (symbolic links kept), "bytes": text.size(),
// "fnv1a64": 16 hex digits of FNV-1a over text (data/fileio.h)} of the text loaded from spec.
nlohmann::json corpus_record(const std::string& spec, const std::string& data_dir, std::string_view text);
// The text at record["path"] (an absolute path: any working directory reads the same file), loaded as
// load_corpus does (max_bytes), after checking it is the text recorded: IoError naming the path, `who`
// (the model that was trained on it) and what differs — bytes and fnv1a64, recorded and now — when the
// file has changed since; IoError when the record is malformed. posgrad eval refuses a changed corpus.
std::string load_recorded_corpus(const nlohmann::json& record, int64_t max_bytes, const std::string& who);

}  // namespace posgrad::data
