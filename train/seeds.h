// seeds.h — derived generator seeds. One unit seed (a --seeds value) gives every purpose inside the
// unit (initialisation, training data, masking, held-out examples, ...) a generator of its own, so
// that a purpose that draws more or fewer numbers changes no other purpose's draws, and two purposes
// never share a sequence by accident. Not a cryptographic derivation, and not the generator itself
// (tensor/random.h's Generator is seeded with the value returned here).
//
// Older callers in compare/ still derive some seeds by their own arithmetic (seed * 1000003 + k,
// seed ^ 0x5eedd0, ...); those are kept where they are, named, because changing them changes every
// number a comparison reports. New code uses stream().
#pragma once

#include <cstdint>
#include <string_view>

namespace posgrad::train {

// The seed of purpose `tag` within unit seed `seed`: SplitMix64's output function (Steele, Lea &
// Flood 2014, "Fast splittable pseudorandom number generators"; Vigna's splitmix64.c) applied to
// seed·γ + tag·c1 + c2, with γ = 2^64/φ (φ the golden ratio) and c1, c2 SplitMix64's mixing
// constants (arithmetic modulo 2^64). Deterministic across platforms and builds; distinct tags of one seed,
// and one tag of distinct seeds, give unrelated values (the finaliser is a bijection of the sum, so
// two pairs collide only where their sums do). The encoder track's streams are numbered tags.
constexpr uint64_t stream(uint64_t seed, uint64_t tag) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + tag * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The same with a named purpose ("passkey.depths"): the tag is the name's 64-bit FNV-1a
// (data/fileio.h), so that a study names its streams instead of numbering them. The name is
// case-sensitive and any bytes are allowed; the empty name is a tag like any other.
uint64_t stream(uint64_t seed, std::string_view tag);

}  // namespace posgrad::train
