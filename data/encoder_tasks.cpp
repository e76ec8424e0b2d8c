// encoder_tasks.cpp — see encoder_tasks.h.
#include "data/encoder_tasks.h"

#include <algorithm>

#include "tensor/errors.h"

namespace posgrad::data {

const std::vector<std::string>& encoder_task_names() {
  static const std::vector<std::string> n = {"reversed", "marker_segment", "line_word"};
  return n;
}

EncoderTask parse_encoder_task(const std::string& name) {
  if (name == "reversed") return EncoderTask::Reversed;
  if (name == "marker_segment") return EncoderTask::MarkerSegment;
  if (name == "line_word") return EncoderTask::LineWord;
  throw ValueError("unknown encoder task '" + name + "' (known: reversed|marker_segment|line_word)");
}

const char* encoder_task_name(EncoderTask t) {
  switch (t) {
    case EncoderTask::Reversed: return "reversed";
    case EncoderTask::MarkerSegment: return "marker_segment";
    case EncoderTask::LineWord: return "line_word";
  }
  return "?";
}

bool is_labelling_task(EncoderTask t) { return t == EncoderTask::LineWord; }

TaskVocab task_vocab(const Tokenizer& tok, int64_t marker_id) {
  TaskVocab v;
  v.marker_id = marker_id;
  for (const char c : std::string(" \t\r\n")) {
    std::vector<int64_t> id;
    try {
      id = tok.encode(std::string(1, c));
    } catch (const ValueError&) {
      continue;  // the byte is not in the corpus's vocabulary
    }
    v.whitespace_ids.push_back(id.at(0));
    if (c == '\n') v.newline_id = id.at(0);
  }
  return v;
}

std::vector<int64_t> line_word_tags(const std::vector<int64_t>& w, const TaskVocab& vocab, int64_t word_k) {
  auto is_space = [&](int64_t id) {
    return std::find(vocab.whitespace_ids.begin(), vocab.whitespace_ids.end(), id) != vocab.whitespace_ids.end() ||
           id == vocab.newline_id;
  };
  std::vector<int64_t> tags(w.size(), 0);
  int64_t word = -1;  // index of the current word in its line; -1: no visible line start yet
  bool in_word = false;
  for (size_t t = 0; t < w.size(); ++t) {
    if (w[t] == vocab.newline_id) {
      word = 0;
      in_word = false;
      continue;
    }
    if (is_space(w[t])) {
      in_word = false;
      continue;
    }
    if (!in_word) {
      in_word = true;
      if (word >= 0) ++word;
      if (word == word_k) tags[t] = 1;
      continue;
    }
    if (word == word_k) tags[t] = 2;
  }
  return tags;
}

EncoderTaskGenerator::EncoderTaskGenerator(EncoderTask task, TokenSpan tokens, TaskVocab vocab, uint64_t seed,
                                           TaskOptions opt)
    : task_(task), tokens_(std::move(tokens)), vocab_(std::move(vocab)), opt_(opt), gen_(seed) {
  POSGRAD_CHECK(tokens_.size() >= 2, ValueError, "encoder task: the corpus needs at least 2 tokens, got ",
                tokens_.size());
  POSGRAD_CHECK(opt_.segments >= 2, ValueError, "encoder task: segments must be >= 2, got ", opt_.segments);
  POSGRAD_CHECK(opt_.word_k >= 1, ValueError, "encoder task: word_k must be >= 1, got ", opt_.word_k);
  if (task_ == EncoderTask::MarkerSegment) {
    POSGRAD_CHECK(vocab_.marker_id >= 0, ValueError, "marker_segment: the marker id must be >= 0, got ",
                  vocab_.marker_id);
    for (int64_t i = 0; i < tokens_.size(); ++i)
      POSGRAD_CHECK(tokens_[i] != vocab_.marker_id, ValueError, "marker_segment: the marker id ", vocab_.marker_id,
                    " occurs in the corpus (at token ", i, "); use an id past the corpus vocabulary");
  }
  if (task_ == EncoderTask::LineWord)
    POSGRAD_CHECK(vocab_.newline_id >= 0, ValueError, "line_word: the corpus vocabulary has no newline");
}

int64_t EncoderTaskGenerator::num_labels() const {
  switch (task_) {
    case EncoderTask::Reversed: return 2;
    case EncoderTask::MarkerSegment: return opt_.segments;
    case EncoderTask::LineWord: return 3;
  }
  return 0;
}

TaskBatch EncoderTaskGenerator::next(int64_t batch, int64_t T) {
  POSGRAD_CHECK(batch >= 1, ValueError, "encoder task: batch must be >= 1, got ", batch);
  POSGRAD_CHECK(T >= 2 && T <= tokens_.size(), ValueError, "encoder task: length ", T, " must be in [2, ",
                tokens_.size(), "] (the corpus length)");
  POSGRAD_CHECK(task_ != EncoderTask::MarkerSegment || T >= opt_.segments, ValueError, "marker_segment: length ", T,
                " is shorter than the ", opt_.segments, " segments");
  std::vector<int64_t> in, lab;
  in.reserve(static_cast<size_t>(batch * T));
  const uint64_t starts = static_cast<uint64_t>(tokens_.size() - T + 1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = static_cast<int64_t>(gen_.next_u64() % starts);
    std::vector<int64_t> w(tokens_.data() + s, tokens_.data() + s + T);
    switch (task_) {
      case EncoderTask::Reversed: {
        const int64_t y = gen_.next_unit() < 0.5 ? 1 : 0;
        if (y) std::reverse(w.begin(), w.end());
        lab.push_back(y);
        break;
      }
      case EncoderTask::MarkerSegment: {  // the first T - 1 tokens of the window, the marker inserted at p
        const int64_t p = static_cast<int64_t>(gen_.next_u64() % static_cast<uint64_t>(T));
        w.pop_back();
        w.insert(w.begin() + p, vocab_.marker_id);
        lab.push_back(p * opt_.segments / T);
        break;
      }
      case EncoderTask::LineWord: {
        const auto tags = line_word_tags(w, vocab_, opt_.word_k);
        lab.insert(lab.end(), tags.begin(), tags.end());
        break;
      }
    }
    in.insert(in.end(), w.begin(), w.end());
  }
  TaskBatch out;
  out.input = Tensor::from_ints(in, {batch, T});
  out.labels = is_labelling_task(task_) ? Tensor::from_ints(lab, {batch, T}) : Tensor::from_ints(lab, {batch});
  return out;
}

TaskBatch EncoderTaskGenerator::next_balanced(int64_t groups, int64_t T) {
  if (task_ == EncoderTask::LineWord) return next(groups, T);
  POSGRAD_CHECK(groups >= 1, ValueError, "encoder task: groups must be >= 1, got ", groups);
  POSGRAD_CHECK(T >= 2 && T <= tokens_.size(), ValueError, "encoder task: length ", T, " must be in [2, ",
                tokens_.size(), "] (the corpus length)");
  POSGRAD_CHECK(task_ != EncoderTask::MarkerSegment || T >= opt_.segments, ValueError, "marker_segment: length ", T,
                " is shorter than the ", opt_.segments, " segments");
  const int64_t k = num_labels();
  std::vector<int64_t> in, lab;
  in.reserve(static_cast<size_t>(groups * k * T));
  const uint64_t starts = static_cast<uint64_t>(tokens_.size() - T + 1);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t s = static_cast<int64_t>(gen_.next_u64() % starts);
    const std::vector<int64_t> w(tokens_.data() + s, tokens_.data() + s + T);
    for (int64_t c = 0; c < k; ++c) {
      std::vector<int64_t> x = w;
      if (task_ == EncoderTask::Reversed) {
        if (c == 1) std::reverse(x.begin(), x.end());
      } else {  // positions p with floor(p S / T) == c: [ceil(c T / S), ceil((c + 1) T / S))
        const int64_t S = opt_.segments, lo = (c * T + S - 1) / S, hi = ((c + 1) * T + S - 1) / S;
        const int64_t p = lo + static_cast<int64_t>(gen_.next_u64() % static_cast<uint64_t>(hi - lo));
        x.pop_back();
        x.insert(x.begin() + p, vocab_.marker_id);
      }
      in.insert(in.end(), x.begin(), x.end());
      lab.push_back(c);
    }
  }
  TaskBatch out;
  out.input = Tensor::from_ints(in, {groups * k, T});
  out.labels = Tensor::from_ints(lab, {groups * k});
  return out;
}

}  // namespace posgrad::data
