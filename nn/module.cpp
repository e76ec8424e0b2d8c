// module.cpp — see module.h.
#include "nn/module.h"

#include <set>

#include "autograd/node.h"
#include "autograd/ops/view.h"

namespace posgrad::nn {

// Parameters, buffers and children share one namespace: their dotted names are the state_dict keys.
static void check_name(const std::string& name, const NamedTensors& params, const NamedTensors& buffers,
                       const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& c) {
  POSGRAD_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, "invalid module member name '", name,
                "'");
  for (const auto& [n, t] : params) POSGRAD_CHECK(n != name, ValueError, "duplicate member name '", name, "'");
  for (const auto& [n, t] : buffers) POSGRAD_CHECK(n != name, ValueError, "duplicate member name '", name, "'");
  for (const auto& [n, m] : c) POSGRAD_CHECK(n != name, ValueError, "duplicate member name '", name, "'");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_name(name, params_, buffers_, children_);
  // An existing parameter (a leaf that requires grad, e.g. another module's weight) is kept as the
  // same tensor, so tied weights stay one tensor: one gradient, listed once, updated once. Anything
  // else becomes a fresh leaf that shares the data but not the history.
  if (!(t.is_leaf() && t.requires_grad())) {
    t = t.detach();
    t.set_requires_grad(true);
  }
  if (t.name().empty()) t.set_name(name);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, params_, buffers_, children_);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, params_, buffers_, children_);
  POSGRAD_CHECK(m != nullptr, ValueError, "register_module('", name, "') with a null module");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool recurse, NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, true, out);
}

// A tensor shared by two modules (e.g. tied embeddings) is listed once, under its first name.
static NamedTensors unique_tensors(const NamedTensors& all) {
  NamedTensors unique;
  std::set<const TensorImpl*> seen;
  for (const auto& p : all)
    if (seen.insert(&p.second.impl()).second) unique.push_back(p);
  return unique;
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, false, recurse, out);
  return unique_tensors(out);
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, true, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void assign_data(const Tensor& dst, const Tensor& src) {
  POSGRAD_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), ShapeError, "assign_data: ", dst.str(),
                " <- ", src.str());
  NoGradGuard guard;
  Tensor s = src.to(dst.device()).contiguous();
  ops::copy_into(dst, s);
}

static void move_in_place(const Tensor& t, Device dev) {
  if (t.device() == dev) return;
  Tensor moved = t.detach().to(dev).contiguous();
  TensorImpl& impl = t.impl();
  impl.storage = moved.impl().storage;
  impl.strides = moved.strides();
  impl.offset = 0;
  impl.grad.reset();
}

void Module::to(Device dev) {
  for (auto& [n, t] : named_parameters()) move_in_place(t, dev);
  for (auto& [n, t] : named_buffers()) move_in_place(t, dev);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, true, true, out);
  return unique_tensors(out);
}

void Module::load_state_dict(const NamedTensors& state) {
  // Validate everything first, then copy: a failed load leaves the model as it was.
  NamedTensors mine = state_dict();
  std::vector<const Tensor*> srcs;
  std::set<std::string> used;
  for (auto& [name, dst] : mine) {
    const Tensor* src = nullptr;
    for (auto& [n, t] : state)
      if (n == name) src = &t;
    POSGRAD_CHECK(src != nullptr, IoError, "checkpoint is missing tensor '", name, "'");
    POSGRAD_CHECK(src->shape() == dst.shape(), IoError, "checkpoint tensor '", name, "' has shape ",
                  shape_str(src->shape()), ", the model expects ", shape_str(dst.shape()));
    POSGRAD_CHECK(src->dtype() == dst.dtype(), IoError, "checkpoint tensor '", name, "' has dtype ",
                  dtype_name(src->dtype()), ", the model expects ", dtype_name(dst.dtype()));
    srcs.push_back(src);
    used.insert(name);
  }
  for (auto& [n, t] : state)
    POSGRAD_CHECK(used.count(n), IoError, "checkpoint has unexpected tensor '", n, "' (not in this model)");
  for (size_t i = 0; i < mine.size(); ++i) assign_data(mine[i].second, *srcs[i]);
}

}  // namespace posgrad::nn
