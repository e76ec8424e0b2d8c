// encoder_tasks.h — fine-tuning tasks of the encoder track, built deterministically from the corpus
// token ids, each of which needs token ORDER or POSITION to be solved (so that NoPE, which in a
// bidirectional encoder sees only the multiset of tokens, cannot beat chance on the two
// sequence-classification tasks):
//   reversed        (sequence, 2 classes) a corpus window of T tokens, reversed (label 1) or in
//                   corpus order (label 0), with probability 1/2 each. The multiset is the same.
//   marker_segment  (sequence, S classes, S = segments) T - 1 tokens of the corpus with the marker
//                   token [MARK] inserted at a uniformly drawn position p (the tokens after it shift
//                   right); the label is the segment floor(p S / T) that holds it. The multiset does
//                   not depend on p.
//   line_word       (token labelling, BIO with one span type WORD) a corpus window; a line starts
//                   after each newline token inside the window, and the k-th word of every such
//                   line (a word: a maximal run of non-whitespace tokens) is a span: B on its first
//                   token, I on the rest (cut by the window's end if it runs past it), O elsewhere.
//                   Words before the window's first newline are never tagged (their line start is
//                   not visible).
// Tag ids of the labelling task: O = 0, B-WORD = 1, I-WORD = 2 (compare/studies/encoder/encoder_metrics.h reads
// the same convention: B of type t = 1 + 2t, I = 2 + 2t).
// Draws come from a posgrad::Generator (its state is the task state): the window start, then the
// task's draw, per example. Not here: padding; tasks over several sequences (sentence pairs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

enum class EncoderTask { Reversed, MarkerSegment, LineWord };
// "reversed" | "marker_segment" | "line_word"; ValueError listing them otherwise.
EncoderTask parse_encoder_task(const std::string& name);
const char* encoder_task_name(EncoderTask t);
const std::vector<std::string>& encoder_task_names();
// Token labelling (line_word) or sequence classification (the others).
bool is_labelling_task(EncoderTask t);

// The token ids a task needs beyond the corpus's: the marker, and which corpus ids are whitespace.
struct TaskVocab {
  int64_t marker_id = -1;               // [MARK] (marker_segment)
  int64_t newline_id = -1;              // '\n' in the corpus vocabulary (line_word); -1: absent
  std::vector<int64_t> whitespace_ids;  // ' ', '\t', '\r', '\n' where present
};
// From a tokenizer: newline and whitespace ids looked up by encoding them (absent bytes skipped).
TaskVocab task_vocab(const Tokenizer& tok, int64_t marker_id);

struct TaskOptions {
  int64_t segments = 4;  // marker_segment: S
  int64_t word_k = 1;    // line_word: k (1 = the first word of each line)
};

struct TaskBatch {
  Tensor input;   // int64 (B, T)
  Tensor labels;  // int64 (B) for a sequence task; (B, T) tags for line_word
};

class EncoderTaskGenerator {
 public:
  // tokens: the corpus ids (at least 2 tokens). ValueError: segments < 2, word_k < 1, a marker id
  // that is a corpus id or negative (marker_segment), no newline id (line_word).
  EncoderTaskGenerator(EncoderTask task, TokenSpan tokens, TaskVocab vocab, uint64_t seed, TaskOptions opt = {});
  // ValueError unless batch >= 1 and 2 <= T <= the corpus length (and T >= segments for marker_segment).
  TaskBatch next(int64_t batch, int64_t T);
  // The held-out form of a sequence task: `groups` corpus windows, each followed by one example of
  // every class built from that same window (reversed: the window, then its reversal; marker_segment:
  // the marker inserted at a uniformly drawn position inside segment 0, 1, ..., S - 1), so (groups x classes)
  // examples with exactly balanced labels. A model blind to order gives every example of a group the
  // same prediction, so its accuracy is exactly 1 / classes. For line_word: next(groups, T).
  TaskBatch next_balanced(int64_t groups, int64_t T);
  EncoderTask task() const { return task_; }
  // Classes of the sequence head (2 or segments), or tags of the token head (3).
  int64_t num_labels() const;

 private:
  EncoderTask task_;
  TokenSpan tokens_;
  TaskVocab vocab_;
  TaskOptions opt_;
  Generator gen_;
};

// The line_word tags of one window (exposed for tests): O = 0, B = 1, I = 2 per token.
std::vector<int64_t> line_word_tags(const std::vector<int64_t>& window, const TaskVocab& vocab, int64_t word_k);

}  // namespace posgrad::data
