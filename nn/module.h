// module.h — Module: the libtorch-style container of parameters, buffers and submodules.
// register_parameter / register_buffer / register_module, named_parameters() with dotted names
// ("blocks.0.attn.qkv.weight"), recursive train()/eval()/to(device)/zero_grad(). The names are the
// keys of checkpoints, weight-decay groups and test messages. Not here: any layer math.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters become leaves that require grad. Returns the stored handle (keep it as a member).
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer in place (all handles see the new device).
  void to(Device dev);
  void zero_grad();

  // Parameters and buffers by dotted name; load checks names, shapes and dtypes and names what
  // is missing, unexpected or mismatched (IoError).
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse, NamedTensors& out) const;

  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// An indexed list of submodules, named "0", "1", ... (e.g. the transformer blocks).
template <typename M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_[i]; }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// Replaces the data of `dst` in place with a copy of `src`'s (same shape and dtype).
void assign_data(const Tensor& dst, const Tensor& src);

}  // namespace posgrad::nn
