// test_module.cpp — nn::Module bookkeeping: registering parameters, buffers and submodules,
// dotted names, tied parameters listed once, train/eval recursion, zero_grad, num_parameters,
// state_dict / load_state_dict round trip and its errors (missing, unexpected, shape and dtype
// mismatch name the tensor; a failed load leaves the model untouched).
// Not here: any layer math (the layer and GPT tests).
#include <gtest/gtest.h>

#include <string>

#include "autograd/ops.h"
#include "nn/module.h"
#include "support/test_util.h"
#include "tensor/random.h"

using namespace posgrad;
using nn::Module;
using nn::ModuleList;
using posgrad::test::thrown_message;

namespace {

struct Lin : Module {
  Tensor weight, bias;
  Lin(int64_t in, int64_t out, uint64_t seed) {
    Generator g(seed);
    weight = register_parameter("weight", randn({out, in}, g, DType::Float64));
    bias = register_parameter("bias", randn({out}, g, DType::Float64));
  }
};

struct Norm : Module {
  Tensor weight, count;
  Norm() {
    weight = register_parameter("weight", Tensor::ones({3}, DType::Float64));
    count = register_buffer("count", Tensor::from_ints({0}, {1}));
  }
};

struct Net : Module {
  Tensor scale, running;
  std::shared_ptr<Lin> inner;
  std::shared_ptr<ModuleList<Module>> blocks;
  explicit Net(uint64_t seed) {
    scale = register_parameter("scale", Tensor::full({1}, 2.0, DType::Float64));
    running = register_buffer("running", Tensor::zeros({4}, DType::Float64));
    inner = register_module("inner", std::make_shared<Lin>(3, 4, seed));
    blocks = register_module("blocks", std::make_shared<ModuleList<Module>>());
    blocks->push_back(std::make_shared<Lin>(4, 4, seed + 1));
    blocks->push_back(std::make_shared<Norm>());
  }
};

std::vector<std::string> names(const nn::NamedTensors& nt) {
  std::vector<std::string> out;
  for (const auto& [n, t] : nt) out.push_back(n);
  return out;
}

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net(1);
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"scale", "inner.weight", "inner.bias", "blocks.0.weight", "blocks.0.bias",
                                      "blocks.1.weight"}));
  EXPECT_EQ(names(net.named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(names(net.named_buffers()), (std::vector<std::string>{"running", "blocks.1.count"}));
  EXPECT_EQ(names(net.state_dict()),
            (std::vector<std::string>{"scale", "running", "inner.weight", "inner.bias", "blocks.0.weight",
                                      "blocks.0.bias", "blocks.1.weight", "blocks.1.count"}));
  auto children = net.named_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].first, "inner");
  EXPECT_EQ(children[1].first, "blocks");
  EXPECT_EQ(net.blocks->size(), 2u);
  // The handles kept as members are the registered tensors.
  auto params = net.named_parameters();
  EXPECT_TRUE(params[1].second.same(net.inner->weight));
  EXPECT_TRUE(net.parameters()[0].same(net.scale));
}

TEST(Module, ParametersAreLeavesThatRequireGrad) {
  Net net(1);
  for (const auto& [n, p] : net.named_parameters()) {
    EXPECT_TRUE(p.is_leaf()) << n;
    EXPECT_TRUE(p.requires_grad()) << n;
  }
  for (const auto& [n, b] : net.named_buffers()) EXPECT_FALSE(b.requires_grad()) << n;
  // A non-leaf becomes a fresh leaf (its history is cut).
  Module m;
  Tensor x = Tensor::ones({2}, DType::Float64);
  x.set_requires_grad(true);
  Tensor y = x * 3.0;
  Tensor p = m.register_parameter("p", y);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(p.to_vector(), (std::vector<double>{3, 3}));
  EXPECT_EQ(p.name(), "p");
  // Integer tensors cannot be parameters (but can be buffers).
  EXPECT_THROW(m.register_parameter("ids", Tensor::from_ints({1}, {1})), DTypeError);
  EXPECT_NO_THROW(m.register_buffer("ids", Tensor::from_ints({1}, {1})));
}

TEST(Module, InvalidAndDuplicateNames) {
  Module m;
  m.register_parameter("w", Tensor::zeros({1}));
  m.register_buffer("buf", Tensor::zeros({1}));
  m.register_module("child", std::make_shared<Module>());
  for (const char* bad : {"", "a.b"}) {
    std::string msg = thrown_message<ValueError>([&] { m.register_parameter(bad, Tensor::zeros({1})); });
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    EXPECT_THROW(m.register_buffer(bad, Tensor::zeros({1})), ValueError);
    EXPECT_THROW(m.register_module(bad, std::make_shared<Module>()), ValueError);
  }
  // Every kind of member shares one namespace (the names are state_dict keys).
  for (const char* taken : {"w", "buf", "child"}) {
    std::string msg = thrown_message<ValueError>([&] { m.register_parameter(taken, Tensor::zeros({1})); });
    EXPECT_NE(msg.find(taken), std::string::npos) << msg;
    EXPECT_THROW(m.register_buffer(taken, Tensor::zeros({1})), ValueError) << taken;
    EXPECT_THROW(m.register_module(taken, std::make_shared<Module>()), ValueError) << taken;
  }
  EXPECT_THROW(m.register_module("null", std::shared_ptr<Module>()), ValueError);
  // Nothing was added by the failed registrations.
  EXPECT_EQ(names(m.state_dict()), (std::vector<std::string>{"w", "buf"}));
}

TEST(Module, TiedParameterListedOnce) {
  // Route 1: the same submodule registered under two names.
  struct Shared : Module {
    std::shared_ptr<Lin> a;
    Shared() {
      a = register_module("a", std::make_shared<Lin>(2, 3, 5));
      register_module("b", a);
    }
  } s;
  EXPECT_EQ(names(s.named_parameters()), (std::vector<std::string>{"a.weight", "a.bias"}));
  EXPECT_EQ(s.num_parameters(), 2 * 3 + 3);
  EXPECT_EQ(names(s.state_dict()), (std::vector<std::string>{"a.weight", "a.bias"}));

  // Route 2: one module registers another module's parameter (weight tying, e.g. LM head = wte).
  struct Tied : Module {
    std::shared_ptr<Lin> emb;
    Tensor head;
    Tied() {
      emb = register_module("emb", std::make_shared<Lin>(4, 6, 7));
      head = register_parameter("head", emb->weight);
    }
  } t;
  EXPECT_TRUE(t.head.same(t.emb->weight)) << "a tied parameter must be the same tensor, not a copy";
  // Listed once, under the name met first (a module's own members come before its children's).
  EXPECT_EQ(names(t.named_parameters()), (std::vector<std::string>{"head", "emb.bias"}));
  EXPECT_EQ(names(t.state_dict()), (std::vector<std::string>{"head", "emb.bias"}));
  EXPECT_EQ(t.num_parameters(), 4 * 6 + 6);
  // Gradients from both uses land in the one tensor.
  sum(t.head * 2.0 + t.emb->weight).backward();
  for (double g : t.emb->weight.grad().to_vector()) EXPECT_EQ(g, 3.0);
  // The tied tensor keeps its first name.
  EXPECT_EQ(t.emb->weight.name(), "weight");
}

TEST(Module, TrainEvalRecurse) {
  Net net(1);
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.inner->is_training());
  EXPECT_FALSE(net.blocks->is_training());
  EXPECT_FALSE((*net.blocks)[0].is_training());
  EXPECT_FALSE((*net.blocks)[1].is_training());
  net.train();
  EXPECT_TRUE((*net.blocks)[1].is_training());
  net.inner->eval();  // a child alone
  EXPECT_FALSE(net.inner->is_training());
  EXPECT_TRUE(net.is_training());
}

TEST(Module, ZeroGradAndNumParameters) {
  Net net(1);
  EXPECT_EQ(net.num_parameters(), 1 + (3 * 4 + 4) + (4 * 4 + 4) + 3);
  Tensor loss = sum(net.inner->weight) + sum(net.scale * net.scale) + sum((*net.blocks)[0].parameters()[1]);
  loss.backward();
  int with_grad = 0;
  for (const auto& p : net.parameters()) with_grad += p.grad().defined();
  EXPECT_EQ(with_grad, 3);
  net.zero_grad();
  for (const auto& [n, p] : net.named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
}

TEST(Module, StateDictRoundTrip) {
  Net a(1), b(100);
  // Change a buffer too so that buffers are seen to travel.
  a.running.data<double>()[2] = 5.0;
  (*a.blocks)[1].named_buffers()[0].second.data<int64_t>()[0] = 42;
  ASSERT_NE(a.inner->weight.to_vector(), b.inner->weight.to_vector());
  Tensor b_weight_handle = b.inner->weight;
  b.load_state_dict(a.state_dict());
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(names(sa), names(sb));
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
    EXPECT_FALSE(sa[i].second.shares_storage(sb[i].second)) << sa[i].first << " must be copied, not shared";
  }
  // Loading is in place: the member handles see the new values and remain parameters.
  EXPECT_TRUE(b_weight_handle.same(b.inner->weight));
  EXPECT_EQ(b_weight_handle.to_vector(), a.inner->weight.to_vector());
  EXPECT_TRUE(b.inner->weight.requires_grad());
  // Later changes to a do not reach b.
  a.inner->weight.data<double>()[0] += 1.0;
  EXPECT_NE(a.inner->weight.to_vector()[0], b.inner->weight.to_vector()[0]);
  // A state with a different order and non-contiguous sources loads the same.
  nn::NamedTensors rev(sa.rbegin(), sa.rend());
  for (auto& [n, t] : rev)
    if (n == "blocks.0.weight") t = t.t().contiguous().t();  // same values, transposed strides
  Net c(200);
  c.load_state_dict(rev);
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(c.state_dict()[i].second.to_vector(), sa[i].second.to_vector());
}

TEST(Module, LoadStateDictErrorsNameTheTensorAndLeaveTheModelUntouched) {
  Net a(1);
  auto base = a.state_dict();
  auto snapshot = [](const Net& n) {
    std::vector<std::vector<double>> v;
    for (auto& [k, t] : n.state_dict()) v.push_back(t.to_vector());
    return v;
  };
  Net b(2);
  const auto before = snapshot(b);

  // Missing tensor.
  nn::NamedTensors missing;
  for (auto& p : base)
    if (p.first != "blocks.0.bias") missing.push_back(p);
  std::string m = thrown_message<IoError>([&] { b.load_state_dict(missing); });
  EXPECT_NE(m.find("'blocks.0.bias'"), std::string::npos) << m;
  EXPECT_NE(m.find("missing"), std::string::npos) << m;
  EXPECT_EQ(snapshot(b), before) << "a failed load must not half-apply";

  // Unexpected tensor.
  nn::NamedTensors extra = base;
  extra.emplace_back("blocks.7.weight", Tensor::zeros({2}, DType::Float64));
  m = thrown_message<IoError>([&] { b.load_state_dict(extra); });
  EXPECT_NE(m.find("'blocks.7.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("unexpected"), std::string::npos) << m;
  EXPECT_EQ(snapshot(b), before) << "a failed load must not half-apply";

  // Shape mismatch names the tensor and both shapes.
  nn::NamedTensors bad_shape = base;
  for (auto& [n, t] : bad_shape)
    if (n == "inner.weight") t = Tensor::zeros({3, 4}, DType::Float64);
  m = thrown_message<IoError>([&] { b.load_state_dict(bad_shape); });
  EXPECT_NE(m.find("'inner.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("(4, 3)"), std::string::npos) << m;
  EXPECT_EQ(snapshot(b), before) << "a failed load must not half-apply";

  // Dtype mismatch.
  nn::NamedTensors bad_dtype = base;
  for (auto& [n, t] : bad_dtype)
    if (n == "blocks.1.weight") t = t.to(DType::Float32);
  m = thrown_message<IoError>([&] { b.load_state_dict(bad_dtype); });
  EXPECT_NE(m.find("'blocks.1.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  EXPECT_EQ(snapshot(b), before) << "a failed load must not half-apply";
}

TEST(Module, ToDevice) {
  Net net(1);
  Tensor w = net.inner->weight;
  net.to(Device::cpu());  // no-op
  EXPECT_TRUE(w.same(net.inner->weight));
  if (!cuda_available()) {
    EXPECT_THROW(net.to(Device::cuda()), DeviceError);
    EXPECT_TRUE(net.inner->weight.device().is_cpu());
  }
}

}  // namespace
