// attention.cpp — the fused attention op (AttentionFn: one autograd node, forward and backward
// kernels in tensor/kernels/cpu/attention.cpp), its naive materialising reference built from the
// ordinary ops, and the attention diagnostics (weight by distance over its uniform share, row
// entropy), computed on the host in float64 from the reference's scores.
//
// A distance bias arrives as a tensor (H, Tq + Tk - 1) and goes to the kernels as it is; its
// gradient comes back as a tensor of the same shape. For content-position terms the modifier's
// relative-position function is evaluated here once per call, per diagonal (Tq + Tk - 1 values):
// the kernels receive, for every diagonal j - i, a compact index into the list of table rows
// actually used, so they never call back into position-encoding code.
// Not here: the position encodings themselves (nn/posenc/), the attention layer (nn/attention.cpp).
#include "autograd/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "autograd/ops.h"

namespace posgrad {

namespace {

// Diagonal -> table-row bookkeeping for content-position terms. Diagonal d = j - i + Tq - 1 holds the pairs
// with relative position r = j - (i + q_offset) = d - (Tq - 1) - q_offset. With per-token positions the
// same over the virtual window: called with (Pq, Pk, 0).
struct RelIndex {
  std::vector<int64_t> diag_u;  // (Tq + Tk - 1) compact row index
  std::vector<int64_t> rows;    // (U) distinct table rows, increasing
};

RelIndex build_rel_index(const ScoreModifier& mod, int64_t R, int64_t Tq, int64_t Tk, int64_t q_offset) {
  POSGRAD_CHECK(static_cast<bool>(mod.bucket), ValueError,
                "attention: the content-position score modifier has no bucket function");
  const int64_t nd = Tq + Tk - 1;
  std::vector<int64_t> row_of(static_cast<size_t>(nd));
  std::vector<int64_t> used(static_cast<size_t>(R), -1);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t r = d - (Tq - 1) - q_offset;
    const int64_t row = mod.bucket(r);
    POSGRAD_CHECK(row >= 0 && row < R, IndexError, "attention: relative position ", r, " maps to table row ", row,
                  ", outside the table's ", R, " rows");
    row_of[d] = row;
    used[row] = 1;
  }
  RelIndex ix;
  for (int64_t row = 0; row < R; ++row)
    if (used[row] >= 0) {
      used[row] = static_cast<int64_t>(ix.rows.size());
      ix.rows.push_back(row);
    }
  ix.diag_u.resize(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) ix.diag_u[d] = used[row_of[d]];
  return ix;
}

// Everything about a call that is not a differentiable tensor input.
struct AttentionConfig {
  ScoreBias kind = ScoreBias::None;
  bool causal = true;
  double scale = 1.0;
  int64_t q_offset = 0;
  RelIndex ix;
  // Per-token positions (empty: none) and the bias / diagonal-index width: Tq + Tk - 1, or the
  // window's Pq + Pk - 1 with positions.
  std::vector<int64_t> q_pos, k_pos;
  int64_t nw = 0;
  // On a CUDA device: ix's arrays in device memory (device_index_array), so the kernels copy nothing.
  Tensor diag_u_device, rows_device;
  bool positions() const { return !q_pos.empty(); }
  const int64_t* diag_u() const {
    return diag_u_device.defined() ? diag_u_device.data<int64_t>() : ix.diag_u.empty() ? nullptr : ix.diag_u.data();
  }
  const int64_t* rows() const {
    return rows_device.defined() ? rows_device.data<int64_t>() : ix.rows.empty() ? nullptr : ix.rows.data();
  }
};

// A device copy of an index array (cached_on_device): the layers of a step and the steps of a run pass
// the same few arrays (one bucket function per encoding, a handful of lengths), so each is copied
// host -> device once instead of at every forward and backward.
Tensor device_index_array(const std::vector<int64_t>& v, const Device& dev) {
  return cached_on_device(Tensor::from_ints(v, {static_cast<int64_t>(v.size())}), dev);
}

struct Dims {
  int64_t B, H, Tq, Tk, D, U;
};

// Validates shapes/dtypes and returns the dimensions.
Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, const Tensor& kr,
                  const Tensor& qr, const Tensor& sinks, const AttentionConfig& cfg, const Tensor& scores = Tensor()) {
  POSGRAD_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, ShapeError,
                "attention: q, k, v must be (B, H, T, D), got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
                shape_str(v.shape()));
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2);
  POSGRAD_CHECK(k.size(0) == B && k.size(1) == H && k.size(3) == D && v.shape() == k.shape(), ShapeError,
                "attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
                " do not agree on (B, H, D) / key length");
  POSGRAD_CHECK(B > 0 && H > 0 && Tq > 0 && Tk > 0 && D > 0, ShapeError, "attention: empty dimension in q ",
                shape_str(q.shape()), " / k ", shape_str(k.shape()));
  POSGRAD_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError,
                "attention: q, k, v must share one floating dtype, got ", q.str(), ", ", k.str(), ", ", v.str());
  POSGRAD_CHECK(k.device() == q.device() && v.device() == q.device(), DeviceError, "attention: device mismatch ",
                q.str(), ", ", k.str(), ", ", v.str());
  auto same_kind = [&](const Tensor& t, const char* what) {
    POSGRAD_CHECK(t.dtype() == q.dtype() && t.device() == q.device(), DTypeError, "attention: ", what, " ", t.str(),
                  " does not match q ", q.str());
  };
  if (sinks.defined()) {
    POSGRAD_CHECK(sinks.dim() == 1 && sinks.size(0) == H, ShapeError, "attention: sinks must be (H = ", H, "), got ",
                  shape_str(sinks.shape()));
    same_kind(sinks, "sinks");
  }
  if (scores.defined()) {
    POSGRAD_CHECK(
        scores.dim() == 4 && scores.size(0) == B && scores.size(1) == H && scores.size(2) == Tq && scores.size(3) == Tk,
        ShapeError, "attention: materialised scores must be (B = ", B, ", H = ", H, ", Tq = ", Tq, ", Tk = ", Tk,
        "), got ", shape_str(scores.shape()));
    same_kind(scores, "materialised scores");
  }
  int64_t U = 0;
  switch (cfg.kind) {
    case ScoreBias::None: break;
    case ScoreBias::Distance:
      POSGRAD_CHECK(bias.defined() && bias.dim() == 2 && bias.size(0) == H && bias.size(1) == cfg.nw, ShapeError,
                    "attention: bias_by_distance must be (H = ", H,
                    cfg.positions() ? ", Pq + Pk - 1 = " : ", Tq + Tk - 1 = ", cfg.nw,
                    cfg.positions() ? " for the window of the per-token positions" : "", "), got ",
                    bias.defined() ? shape_str(bias.shape()) : std::string("undefined"));
      same_kind(bias, "bias_by_distance");
      break;
    case ScoreBias::Dense:
      POSGRAD_CHECK(bias.defined() && bias.dim() == 3 && bias.size(0) == H && bias.size(1) == Tq && bias.size(2) == Tk,
                    ShapeError, "attention: bias_dense must be (H = ", H, ", Tq = ", Tq, ", Tk = ", Tk, "), got ",
                    bias.defined() ? shape_str(bias.shape()) : std::string("undefined"));
      same_kind(bias, "bias_dense");
      break;
    case ScoreBias::Separable:
      POSGRAD_CHECK(
          bias.defined() && bias.dim() == 3 && bias.size(0) == B && bias.size(1) == H && bias.size(2) == Tq + Tk,
          ShapeError, "attention: bias_separable must be (B = ", B, ", H = ", H, ", Tq + Tk = ", Tq + Tk, "), got ",
          bias.defined() ? shape_str(bias.shape()) : std::string("undefined"));
      same_kind(bias, "bias_separable");
      break;
    case ScoreBias::ContentPosition: {
      POSGRAD_CHECK(kr.defined() || qr.defined(), ValueError,
                    "attention: the content-position modifier needs kr (c2p) and/or qr (p2c)");
      for (const Tensor* t : {&kr, &qr}) {
        if (!t->defined()) continue;
        POSGRAD_CHECK(t->dim() == 3 && t->size(1) == H && t->size(2) == D, ShapeError,
                      "attention: kr/qr must be (R, H = ", H, ", D = ", D, "), got ", shape_str(t->shape()));
        same_kind(*t, "kr/qr");
      }
      POSGRAD_CHECK(!(kr.defined() && qr.defined()) || kr.size(0) == qr.size(0), ShapeError, "attention: kr ",
                    shape_str(kr.shape()), " and qr ", shape_str(qr.shape()), " differ in rows");
      U = static_cast<int64_t>(cfg.ix.rows.size());
      break;
    }
  }
  return {B, H, Tq, Tk, D, U};
}

int64_t table_rows(const ScoreModifier& mod) {
  if (mod.kind == ScoreBias::ContentPosition)
    return mod.kr.defined() ? mod.kr.size(0) : mod.qr.defined() ? mod.qr.size(0) : 0;
  return 0;
}

AttentionConfig make_config(const ScoreModifier& mod, const Tensor& q, const Tensor& k, bool causal, double scale,
                            int64_t q_offset) {
  AttentionConfig cfg;
  cfg.kind = mod.kind;
  cfg.causal = causal;
  cfg.scale = scale;
  cfg.q_offset = q_offset;
  POSGRAD_CHECK(std::isfinite(scale), ValueError, "attention: scale must be finite, got ", scale);
  POSGRAD_CHECK(mod.kind != ScoreBias::ContentPosition || mod.kr.defined() || mod.qr.defined(), ValueError,
                "attention: the content-position modifier needs kr (c2p) and/or qr (p2c)");
  POSGRAD_CHECK(!mod.scores.defined() || (mod.kind == ScoreBias::None && !mod.has_positions()), ValueError,
                "attention: materialised scores are the whole logits: the modifier then has no other kind and no "
                "per-token positions");
  const bool shaped = q.dim() == 4 && k.dim() == 4;  // (check_inputs names a bad shape)
  if (shaped) cfg.nw = q.size(2) + k.size(2) - 1;
  if (mod.kind == ScoreBias::Dense || mod.kind == ScoreBias::Separable) {
    const char* what =
        mod.kind == ScoreBias::Dense ? "the dense (H, Tq, Tk) bias (FIRE)" : "the separable (B, H, Tq + Tk) bias (FoX)";
    POSGRAD_CHECK(!q.device().is_cuda(), DeviceError, "attention: ", what,
                  " has no CUDA kernel; run it on the CPU (--device cpu)");
    POSGRAD_CHECK(!mod.has_positions(), ValueError, "attention: ", what,
                  " is indexed by query and key; the encoding applies per-token positions when it builds it, so the "
                  "modifier carries none");
  }
  if (mod.has_positions()) {
    POSGRAD_CHECK(!q.device().is_cuda(), DeviceError,
                  "attention: per-token positions (randomized positions) have no CUDA kernel; train with them on "
                  "the CPU");
    POSGRAD_CHECK(q_offset == 0, ValueError, "attention: per-token positions take no query offset, got ", q_offset,
                  " (positions are for whole-sequence training forwards, not key/value-cache steps)");
    auto check_positions = [](const std::vector<int64_t>& p, int64_t n, const char* what) {
      POSGRAD_CHECK(static_cast<int64_t>(p.size()) == n, ValueError, "attention: ", what, " has ", p.size(),
                    " entries for ", n, " tokens");
      for (size_t i = 0; i < p.size(); ++i)
        POSGRAD_CHECK(p[i] >= 0 && (i == 0 || p[i] > p[i - 1]), ValueError, "attention: ", what,
                      " must be >= 0 and strictly increasing, got ", p[i], " at index ", i);
    };
    if (shaped) {
      check_positions(mod.query_positions, q.size(2), "query_positions");
      check_positions(mod.key_positions, k.size(2), "key_positions");
      cfg.q_pos = mod.query_positions;
      cfg.k_pos = mod.key_positions;
      cfg.nw = kernels::checked_add(cfg.q_pos.back(), cfg.k_pos.back() + 1, "attention positions");
    }
  }
  if (mod.kind == ScoreBias::ContentPosition && shaped) {
    if (cfg.positions())
      cfg.ix = build_rel_index(mod, table_rows(mod), cfg.q_pos.back() + 1, cfg.k_pos.back() + 1, 0);
    else
      cfg.ix = build_rel_index(mod, table_rows(mod), q.size(2), k.size(2), q_offset);
    if (q.device().is_cuda()) {
      cfg.diag_u_device = device_index_array(cfg.ix.diag_u, q.device());
      cfg.rows_device = device_index_array(cfg.ix.rows, q.device());
    }
  }
  return cfg;
}

// The modifier's tensors that the op takes as inputs, by kind (undefined where unused).
struct ModifierInputs {
  Tensor bias, kr, qr, sinks, scores;
};
ModifierInputs modifier_inputs(const ScoreModifier& mod) {
  ModifierInputs in;
  in.sinks = mod.sinks;
  in.scores = mod.scores;
  if (mod.kind == ScoreBias::Distance) in.bias = mod.bias_by_distance;
  if (mod.kind == ScoreBias::Dense) in.bias = mod.bias_dense;
  if (mod.kind == ScoreBias::Separable) in.bias = mod.bias_separable;
  if (mod.kind == ScoreBias::ContentPosition) in.kr = mod.kr, in.qr = mod.qr;
  return in;
}

// On the CPU the kernels read and write each (B, H, T, D) operand through its strides
// (kernels::cpu::HeadStrides): q, k, v straight from split_heads' views of the (B, T, 3C) projection,
// the output into (B, T, H, D) memory that merging the heads reads without a copy, dq, dk, dv into the
// thirds of one (B, T, 3C) buffer that split_heads' backward passes on as it is. CUDA keeps dense copies.
bool rows_contiguous(const Tensor& t) { return t.dim() == 4 && t.strides()[3] == 1; }
kernels::cpu::HeadStrides head_strides(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2]}; }
// t itself when the kernels can read it through its strides (CPU, last dim contiguous), else a dense copy.
Tensor strided_or_dense(const Tensor& t) {
  return t.defined() && !t.device().is_cuda() && rows_contiguous(t) ? t : t.contiguous();
}
// q, k, v are split_heads' three views of one (B, T, 3 H D) buffer: same storage, the heads of one
// token row D apart, the rows 3 H D apart, k and v H D and 2 H D after q.
bool packed_thirds(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!rows_contiguous(q) || !q.shares_storage(k) || !q.shares_storage(v) || q.shape() != k.shape() ||
      q.shape() != v.shape() || q.strides() != k.strides() || q.strides() != v.strides())
    return false;
  const int64_t H = q.size(1), T = q.size(2), D = q.size(3);
  const Shape& st = q.strides();
  return st[1] == D && st[2] == 3 * H * D && st[0] == T * st[2] && k.offset() == q.offset() + H * D &&
         v.offset() == q.offset() + 2 * H * D;
}

struct AttentionFn : Function<AttentionFn> {
  static constexpr const char* kName = "attention";
  struct Saved {
    Tensor q, k, v, o, stats, bias, kr, qr, sinks;  // stats (B, H, Tq, 2): per-row (max, log sum), see kernels_decl.inc
    // CPU, content-position terms: the forward's scratch, whose c2p / p2c products the backward reuses
    // (kernels::cpu::attention_backward_strided) instead of computing them a second time.
    Tensor prepared;
    AttentionConfig cfg;
    Dims dims{};
  };
  static Tensor forward(Context<Saved>& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& kr, const Tensor& qr, const Tensor& sinks, const AttentionConfig& cfg) {
    const Dims d = check_inputs(q, k, v, bias, kr, qr, sinks, cfg);
    const bool cpu = !q.device().is_cuda();
    Tensor qc = strided_or_dense(q), kc = strided_or_dense(k), vc = strided_or_dense(v);
    Tensor tc = bias.defined() ? bias.contiguous() : Tensor();
    Tensor krc = kr.defined() ? kr.contiguous() : Tensor(), qrc = qr.defined() ? qr.contiguous() : Tensor();
    Tensor snc = sinks.defined() ? sinks.contiguous() : Tensor();
    // (B, H, Tq, D); on the CPU a view of (B, Tq, H, D) memory.
    Tensor o = cpu ? Tensor::empty({d.B, d.Tq, d.H, d.D}, q.dtype(), q.device()).permute({0, 2, 1, 3})
                   : Tensor::empty({d.B, d.H, d.Tq, d.D}, q.dtype(), q.device());
    Tensor stats = Tensor::empty({d.B, d.H, d.Tq, 2}, q.dtype(), q.device());
    const int64_t ns =
        cfg.positions()
            ? kernels::cpu::attention_positions_scratch_elems(cfg.kind, 0, d.B, d.H, d.Tq, d.Tk, d.D, d.U, cfg.nw)
            : kernels::cpu::attention_scratch_elems(cfg.kind, 0, d.B, d.H, d.Tq, d.Tk, d.D, d.U);
    Tensor scratch = Tensor::empty({std::max<int64_t>(ns, 1)}, q.dtype(), q.device());
    const int64_t* du = cfg.diag_u();
    const int64_t* rows = cfg.rows();
    dispatch_floating(q.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      if (cpu) {  // per-token positions are CPU only (make_config refuses them on CUDA)
        const kernels::cpu::AttentionStrides st{
            head_strides(qc), head_strides(kc), head_strides(vc), head_strides(o), head_strides(o), {}, {}, {}};
        kernels::cpu::attention_forward_strided<T>(
            o.data<T>(), stats.data<T>(), scratch.data<T>(), qc.data<T>(), kc.data<T>(), vc.data<T>(),
            data_or_null<T>(tc), data_or_null<T>(krc), data_or_null<T>(qrc), data_or_null<T>(snc), du, rows,
            cfg.positions() ? cfg.q_pos.data() : nullptr, cfg.positions() ? cfg.k_pos.data() : nullptr, d.B, d.H, d.Tq,
            d.Tk, d.D, d.U, cfg.q_offset, cfg.kind, cfg.causal, T(cfg.scale), st);
        return;
      }
      POSGRAD_KERNEL(q.device(), attention_forward<T>, o.data<T>(), stats.data<T>(), scratch.data<T>(), qc.data<T>(),
                     kc.data<T>(), vc.data<T>(), data_or_null<T>(tc), data_or_null<T>(krc), data_or_null<T>(qrc),
                     data_or_null<T>(snc), du, rows, d.B, d.H, d.Tq, d.Tk, d.D, d.U, cfg.q_offset, cfg.kind, cfg.causal,
                     T(cfg.scale));
    });
    ctx.saved = {save_tensor(qc),
                 save_tensor(kc),
                 save_tensor(vc),
                 save_tensor(o),
                 stats,
                 save_tensor(tc),
                 save_tensor(krc),
                 save_tensor(qrc),
                 save_tensor(snc),
                 cpu && cfg.kind == ScoreBias::ContentPosition ? scratch : Tensor(),
                 cfg,
                 d};
    return o;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    const Dims& d = s.dims;
    const bool cpu = !s.q.device().is_cuda();
    Tensor dout = strided_or_dense(grads[0]);
    auto zeros_like = [&](const Tensor& t, size_t slot) {
      return ctx.needs(slot) ? Tensor::zeros(t.shape(), t.dtype(), t.device()) : Tensor();
    };
    Tensor dq, dk, dv;
    // On the CPU dq, dk and dv are written by the kernel (overwrite: each head's rows zeroed by the
    // thread that accumulates into them), so they need no zero fill of their own.
    auto empty_like = [&](const Tensor& t, size_t slot) {
      return ctx.needs(slot) ? Tensor::empty(t.shape(), t.dtype(), t.device()) : Tensor();
    };
    if (cpu && packed_thirds(s.q, s.k, s.v)) {
      // One (B, T, 3 H D) gradient whose thirds have q's, k's and v's layout: split_heads' backward
      // then hands it on without a copy. A third not needed is never written: zero it here (a
      // gradient the caller sees whole must hold no stale memory).
      const bool all = ctx.needs(0) && ctx.needs(1) && ctx.needs(2);
      const Shape gs{d.B, d.Tq, 3 * d.H * d.D};
      const Tensor g =
          all ? Tensor::empty(gs, s.q.dtype(), s.q.device()) : Tensor::zeros(gs, s.q.dtype(), s.q.device());
      auto third = [&](int64_t part, size_t slot) {
        return ctx.needs(slot) ? g.as_strided_nograd(s.q.shape(), s.q.strides(), part * d.H * d.D) : Tensor();
      };
      dq = third(0, 0), dk = third(1, 1), dv = third(2, 2);
    } else if (cpu) {
      dq = empty_like(s.q, 0), dk = empty_like(s.k, 1), dv = empty_like(s.v, 2);
    } else {
      dq = zeros_like(s.q, 0), dk = zeros_like(s.k, 1), dv = zeros_like(s.v, 2);
    }
    Tensor dbias = s.bias.defined() ? zeros_like(s.bias, 3) : Tensor();
    Tensor dkr = s.kr.defined() ? zeros_like(s.kr, 4) : Tensor();
    Tensor dqr = s.qr.defined() ? zeros_like(s.qr, 5) : Tensor();
    Tensor dsinks = s.sinks.defined() ? zeros_like(s.sinks, 6) : Tensor();
    const int64_t ns =
        s.cfg.positions()
            ? kernels::cpu::attention_positions_scratch_elems(s.cfg.kind, 1, d.B, d.H, d.Tq, d.Tk, d.D, d.U, s.cfg.nw)
            : kernels::cpu::attention_scratch_elems(s.cfg.kind, 1, d.B, d.H, d.Tq, d.Tk, d.D, d.U);
    Tensor scratch = Tensor::empty({std::max<int64_t>(ns, 1)}, dout.dtype(), dout.device());
    const int64_t* du = s.cfg.diag_u();
    const int64_t* rows = s.cfg.rows();
    dispatch_floating(dout.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      if (cpu) {
        auto strides_or_none = [](const Tensor& t) {
          return t.defined() ? head_strides(t) : kernels::cpu::HeadStrides{};
        };
        const kernels::cpu::AttentionStrides st{head_strides(s.q),   head_strides(s.k),  head_strides(s.v),
                                                head_strides(s.o),   head_strides(dout), strides_or_none(dq),
                                                strides_or_none(dk), strides_or_none(dv)};
        kernels::cpu::attention_backward_strided<T>(
            data_or_null<T>(dq), data_or_null<T>(dk), data_or_null<T>(dv), data_or_null<T>(dbias), data_or_null<T>(dkr),
            data_or_null<T>(dqr), data_or_null<T>(dsinks), scratch.data<T>(), dout.data<T>(), data_or_null<T>(s.q),
            data_or_null<T>(s.k), data_or_null<T>(s.v), data_or_null<T>(s.o), data_or_null<T>(s.stats),
            data_or_null<T>(s.bias), data_or_null<T>(s.kr), data_or_null<T>(s.qr), data_or_null<T>(s.sinks), du, rows,
            s.cfg.positions() ? s.cfg.q_pos.data() : nullptr, s.cfg.positions() ? s.cfg.k_pos.data() : nullptr, d.B,
            d.H, d.Tq, d.Tk, d.D, d.U, s.cfg.q_offset, s.cfg.kind, s.cfg.causal, T(s.cfg.scale), st,
            data_or_null<T>(s.prepared), /*overwrite=*/true);
        return;
      }
      POSGRAD_KERNEL(dout.device(), attention_backward<T>, data_or_null<T>(dq), data_or_null<T>(dk),
                     data_or_null<T>(dv), data_or_null<T>(dbias), data_or_null<T>(dkr), data_or_null<T>(dqr),
                     data_or_null<T>(dsinks), scratch.data<T>(), dout.data<T>(), data_or_null<T>(s.q),
                     data_or_null<T>(s.k), data_or_null<T>(s.v), data_or_null<T>(s.o), data_or_null<T>(s.stats),
                     data_or_null<T>(s.bias), data_or_null<T>(s.kr), data_or_null<T>(s.qr), data_or_null<T>(s.sinks),
                     du, rows, d.B, d.H, d.Tq, d.Tk, d.D, d.U, s.cfg.q_offset, s.cfg.kind, s.cfg.causal,
                     T(s.cfg.scale));
    });
    return {dq, dk, dv, dbias, dkr, dqr, dsinks};
  }
};

}  // namespace

std::vector<int64_t> diagonal_relative_positions(int64_t Tq, int64_t Tk, int64_t q_offset) {
  POSGRAD_CHECK(Tq > 0 && Tk > 0, ShapeError, "diagonal_relative_positions: lengths must be positive, got Tq = ", Tq,
                ", Tk = ", Tk);
  const int64_t nd = kernels::checked_add(Tq, Tk, "diagonal_relative_positions") - 1;
  std::vector<int64_t> r(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) r[d] = d - (Tq - 1) - q_offset;
  return r;
}

namespace {
Tensor materialising_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                               double scale, int64_t q_offset);
}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal, double scale,
                 int64_t q_offset) {
  if (mod.scores.defined()) return materialising_attention(q, k, v, mod, causal, scale, q_offset);
  AttentionConfig cfg = make_config(mod, q, k, causal, scale, q_offset);
  const ModifierInputs in = modifier_inputs(mod);
  return AttentionFn::apply(q, k, v, in.bias, in.kr, in.qr, in.sinks, cfg);
}

namespace {

// The unmasked scores s(i, j) = scale q_i.k_j + bias_h(i, j) of every pair, (B, H, Tq, Tk), built
// from ordinary ops (differentiable): what attention_reference softmaxes and what the entropy
// diagnostic reads. The inputs have passed make_config and check_inputs.
Tensor reference_scores(const Tensor& q, const Tensor& k, const ScoreModifier& mod, const AttentionConfig& cfg,
                        const ModifierInputs& in, const Dims& d) {
  const int64_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk;
  const double scale = cfg.scale;
  // Column of pair (i, j) in the bias / diagonal index: its diagonal j - i + Tq - 1, or with
  // per-token positions k_pos[j] - q_pos[i] + Pq - 1 (the window's diagonal).
  auto column = [&](int64_t i, int64_t j) {
    return cfg.positions() ? cfg.k_pos[j] - cfg.q_pos[i] + cfg.q_pos.back() : j - i + Tq - 1;
  };
  // Table row of each (i, j) (content-position terms), from the per-diagonal index the fused op uses.
  auto row_at = [&](int64_t i, int64_t j) { return cfg.ix.rows[cfg.ix.diag_u[column(i, j)]]; };

  if (in.scores.defined()) return in.scores;               // materialised by the encoding: the whole logits
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, Tq, Tk)
  switch (mod.kind) {
    case ScoreBias::None: break;
    case ScoreBias::Distance: {
      // bias[h, column(i, j)] for every (i, j): an embedding lookup into bias^T (nw, H).
      std::vector<int64_t> idx(static_cast<size_t>(Tq * Tk));
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) idx[i * Tk + j] = column(i, j);
      Tensor bias = embedding(in.bias.t(), Tensor::from_ints(idx, {Tq, Tk}).to(q.device()));  // (Tq, Tk, H)
      scores = scores + bias.permute({2, 0, 1});
      break;
    }
    case ScoreBias::Dense: scores = scores + in.bias; break;  // (H, Tq, Tk) broadcast over the batch
    case ScoreBias::Separable:                                // a[b, h, i] + c[b, h, j]
      scores =
          scores + in.bias.narrow(2, 0, Tq).reshape({B, H, Tq, 1}) + in.bias.narrow(2, Tq, Tk).reshape({B, H, 1, Tk});
      break;
    case ScoreBias::ContentPosition: {
      // c2p[b,h,i,j] = C2P[b,h,i,c(i,j)] with C2P = Q Kr^T (B, H, Tq, R): a gather, written as an
      // embedding lookup into the flattened C2P. Likewise p2c with K Qr^T (B, H, Tk, R).
      const int64_t R = table_rows(mod);
      auto gather = [&](const Tensor& prod, int64_t L, bool by_query) {
        std::vector<int64_t> idx(static_cast<size_t>(B * H * Tq * Tk));
        for (int64_t bh = 0; bh < B * H; ++bh)
          for (int64_t i = 0; i < Tq; ++i)
            for (int64_t j = 0; j < Tk; ++j)
              idx[(bh * Tq + i) * Tk + j] = (bh * L + (by_query ? i : j)) * R + row_at(i, j);
        Tensor flat = prod.reshape({B * H * L * R, 1});
        return embedding(flat, Tensor::from_ints(idx, {B, H, Tq, Tk}).to(q.device())).reshape({B, H, Tq, Tk});
      };
      if (mod.kr.defined()) scores = scores + gather(matmul(q, mod.kr.permute({1, 2, 0})), Tq, true) * scale;
      if (mod.qr.defined()) scores = scores + gather(matmul(k, mod.qr.permute({1, 2, 0})), Tk, false) * scale;
      break;
    }
  }
  return scores;
}

}  // namespace

namespace {

// attention_reference, and attention() for materialised scores: every (B, H, Tq, Tk) tensor built by
// ordinary ops (scores, mask, softmax with the sink column, P V).
Tensor materialising_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                               double scale, int64_t q_offset) {
  AttentionConfig cfg = make_config(mod, q, k, causal, scale, q_offset);
  const ModifierInputs in = modifier_inputs(mod);
  const Dims d = check_inputs(q, k, v, in.bias, in.kr, in.qr, in.sinks, cfg, in.scores);
  const int64_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk;
  Tensor scores = reference_scores(q, k, mod, cfg, in, d);  // (B, H, Tq, Tk)
  bool any_empty_row = false;
  if (causal) {
    Tensor mask = Tensor::zeros({Tq, Tk}, DType::Bool);
    uint8_t* mp = mask.data<uint8_t>();
    for (int64_t i = 0; i < Tq; ++i) {
      any_empty_row = any_empty_row || i + q_offset < 0;
      for (int64_t j = 0; j < Tk; ++j) mp[i * Tk + j] = j > i + q_offset ? 1 : 0;
    }
    // A large finite negative (not -inf) so that a fully masked row stays finite; it is zeroed below.
    scores = masked_fill(scores, mask.to(q.device()), -1e30);
  }
  Tensor p;
  if (in.sinks.defined()) {
    // The sink as one more column (B, H, Tq, 1) of logit sinks[h], dropped after the softmax (gpt-oss sdpa).
    const Tensor col = in.sinks.reshape({1, H, 1, 1}) + Tensor::zeros({B, H, Tq, 1}, q.dtype(), q.device());
    p = softmax(cat({scores, col}, -1), -1).narrow(-1, 0, Tk);
  } else {
    p = softmax(scores, -1);
  }
  if (any_empty_row) {  // rows that see no key output 0 (as the fused op does)
    std::vector<double> keep(static_cast<size_t>(Tq));
    for (int64_t i = 0; i < Tq; ++i) keep[i] = i + q_offset < 0 ? 0.0 : 1.0;
    p = p * Tensor::from_vector(keep, {Tq, 1}, q.dtype()).to(q.device());
  }
  return matmul(p, v);
}

}  // namespace

Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreModifier& mod, bool causal,
                           double scale, int64_t q_offset) {
  return materialising_attention(q, k, v, mod, causal, scale, q_offset);
}

namespace {

// The scores s(i, j) of attention_reference (the bias, the content-position terms, the scale; no
// mask, no sinks) on the host in float64, one window at a time: fn(b, s) with s (H, T, T) row-major,
// whatever q's dtype and device (device tensors are copied). Scores that are equal in exact
// arithmetic are then equal to the last bit. The diagnostics below read these rows; `what` names the
// caller in the errors (ShapeError: q, k not the same (B, H, T, D); ValueError: per-token positions).
struct HostDims {
  int64_t B, H, T;
};
HostDims for_each_host_window(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal, double scale,
                              const char* what, const std::function<void(int64_t b, const double* s)>& fn) {
  POSGRAD_CHECK(q.dim() == 4 && q.shape() == k.shape(), ShapeError, what,
                ": q and k must be the same (B, H, T, D), got ", shape_str(q.shape()), ", ", shape_str(k.shape()));
  POSGRAD_CHECK(!mod.has_positions(), ValueError, what,
                ": measures positions 0..T-1; clear the modifier's per-token positions");
  auto host = [](const Tensor& t) { return t.defined() ? t.to(Device::cpu()).to(DType::Float64) : Tensor(); };
  ScoreModifier m = mod;
  m.sinks = Tensor();  // no diagnostic reads the sink (each renormalises over the real keys)
  m.bias_by_distance = host(mod.bias_by_distance);
  m.bias_dense = host(mod.bias_dense);
  m.bias_separable = host(mod.bias_separable);
  m.kr = host(mod.kr);
  m.qr = host(mod.qr);
  m.scores = host(mod.scores);
  const Tensor qh = host(q), kh = host(k);
  const AttentionConfig cfg = make_config(m, qh, kh, causal, scale, 0);
  const ModifierInputs in = modifier_inputs(m);
  const Dims d = check_inputs(qh, kh, kh, in.bias, in.kr, in.qr, in.sinks, cfg, in.scores);
  Dims one = d;
  one.B = 1;
  for (int64_t b = 0; b < d.B; ++b) {  // (1, H, T, T) scores at a time, not (B, H, T, T)
    ModifierInputs in_b = in;          // a per-(b, h) bias: this batch element's rows
    if (m.kind == ScoreBias::Separable) in_b.bias = in.bias.narrow(0, b, 1);
    if (in.scores.defined()) in_b.scores = in.scores.narrow(0, b, 1);
    const std::vector<double> s =
        reference_scores(qh.narrow(0, b, 1), kh.narrow(0, b, 1), m, cfg, in_b, one).contiguous().to_vector();
    fn(b, s.data());
  }
  return {d.B, d.H, d.Tq};
}

// The max and the normaliser z = sum_j exp(row[j] - max) of a row's first n scores, leaving out key
// `skip` (-1: none), summed in key order.
struct RowSoftmax {
  double max, z;
};
RowSoftmax row_softmax(const double* row, int64_t n, int64_t skip = -1) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j)
    if (j != skip) mx = std::max(mx, row[j]);
  double z = 0;
  for (int64_t j = 0; j < n; ++j)
    if (j != skip) z += std::exp(row[j] - mx);
  return {mx, z};
}

}  // namespace

Tensor attention_weight_over_uniform(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal,
                                     double scale) {
  NoGradGuard guard;
  std::vector<double> sum, count;
  int64_t H = 0, T = 0;
  const HostDims d =
      for_each_host_window(q, k, mod, causal, scale, "attention_weight_over_uniform", [&](int64_t b, const double* s) {
        if (b == 0) {
          H = q.size(1);
          T = q.size(2);
          sum.assign(static_cast<size_t>(H * T), 0.0);
          count.assign(static_cast<size_t>(T), 0.0);
        }
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T; ++i) {
            const double* row = s + (h * T + i) * T;
            const int64_t n = causal ? i + 1 : T;  // visible keys 0 .. n-1; the others are j != i
            if (n < 2) continue;                   // no key besides the query's own
            const auto [mx, z] = row_softmax(row, n, i);
            const double others = static_cast<double>(n - 1);
            for (int64_t j = 0; j < n; ++j) {
              if (j == i) continue;
              const int64_t dist = i > j ? i - j : j - i;
              // (n - 1) e / z, in that order: equal scores give e = 1, z = n - 1 exactly, so exactly 1.
              sum[h * T + dist] += others * std::exp(row[j] - mx) / z;
              if (h == 0) count[dist] += 1;
            }
          }
      });
  if (sum.empty()) {  // B = 0: no pair at any distance
    sum.assign(static_cast<size_t>(d.H * d.T), 0.0);
    count.assign(static_cast<size_t>(d.T), 0.0);
  }
  std::vector<double> out(static_cast<size_t>(d.H * std::max<int64_t>(d.T - 1, 0)));
  for (int64_t h = 0; h < d.H; ++h)
    for (int64_t dist = 1; dist < d.T; ++dist)
      out[h * (d.T - 1) + dist - 1] =
          count[dist] > 0 ? sum[h * d.T + dist] / count[dist] : std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_vector(out, {d.H, std::max<int64_t>(d.T - 1, 0)}, DType::Float64);
}

Tensor attention_first_key_share(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal,
                                 double scale) {
  NoGradGuard guard;
  std::vector<double> sum;
  int64_t H = 0, T = 0, rows = 0;
  const HostDims d =
      for_each_host_window(q, k, mod, causal, scale, "attention_first_key_share", [&](int64_t b, const double* s) {
        if (b == 0) {
          H = q.size(1);
          T = q.size(2);
          sum.assign(static_cast<size_t>(H), 0.0);
        }
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 1; i < T; ++i) {
            const double* row = s + (h * T + i) * T;
            const int64_t n = causal ? i + 1 : T;  // visible keys 0 .. n-1
            const auto [mx, z] = row_softmax(row, n);
            // n e / z, in that order: equal scores give e = 1, z = n exactly, so exactly 1.
            sum[h] += static_cast<double>(n) * std::exp(row[0] - mx) / z;
          }
        rows += T - 1;
      });
  std::vector<double> out(static_cast<size_t>(d.H), std::numeric_limits<double>::quiet_NaN());
  if (rows > 0)
    for (int64_t h = 0; h < d.H; ++h) out[h] = sum[h] / static_cast<double>(rows);
  return Tensor::from_vector(out, {d.H}, DType::Float64);
}

Tensor attention_row_entropy(const Tensor& q, const Tensor& k, const ScoreModifier& mod, bool causal, double scale) {
  NoGradGuard guard;
  std::vector<double> out;
  int64_t B = 0, H = 0, T = 0;
  const HostDims d =
      for_each_host_window(q, k, mod, causal, scale, "attention_row_entropy", [&](int64_t b, const double* s) {
        if (b == 0) {
          B = q.size(0);
          H = q.size(1);
          T = q.size(2);
          out.assign(static_cast<size_t>(H * T), 0.0);
        }
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T; ++i) {
            const double* row = s + (h * T + i) * T;
            const int64_t n = causal ? i + 1 : T;  // visible keys 0 .. n-1
            const auto [mx, z] = row_softmax(row, n);
            // H = -sum_j p_j log p_j with log p_j = (s_j - max) - log Z: H = log Z - sum_j p_j (s_j - max).
            double e = std::log(z);
            for (int64_t j = 0; j < n; ++j) e -= std::exp(row[j] - mx) / z * (row[j] - mx);
            out[h * T + i] += e / static_cast<double>(B);
          }
      });
  if (out.empty()) out.assign(static_cast<size_t>(d.H * d.T), 0.0);  // B = 0
  return Tensor::from_vector(out, {d.H, d.T}, DType::Float64);
}

}  // namespace posgrad
