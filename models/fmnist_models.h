// The two models of shared/peers/fmnist.py, layer for layer, so that cohort-ddp-bench and
// PyTorch's DDP (ddp_train.py) time the same computation: same layers, registered in the same
// order under the same names (DDP buckets gradients in reverse registration order, so the
// order decides which allreduce can start first).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace fashion_mnist {

// Lets the training loop call forward() without knowing which model it has.
struct FmnistModel : torch::nn::Module {
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// pytorch/examples mnist/main.py Net (fmnist.Net): 1,199,882 parameters.
struct ConvNet : FmnistModel {
  ConvNet() {
    conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    dropout1_ = register_module("dropout1", torch::nn::Dropout(0.25));
    dropout2_ = register_module("dropout2", torch::nn::Dropout(0.5));
    fc1_ = register_module("fc1", torch::nn::Linear(9216, 128));
    fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(conv1_->forward(x));
    x = torch::relu(conv2_->forward(x));
    x = torch::max_pool2d(x, 2);
    x = dropout1_->forward(x);
    x = torch::flatten(x, 1);
    x = torch::relu(fc1_->forward(x));
    x = dropout2_->forward(x);
    return torch::log_softmax(fc2_->forward(x), 1);
  }

  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Dropout dropout1_{nullptr}, dropout2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// ConvNet with a BatchNorm after each convolution: the model of the large-batch experiments
// and of --sync-bn (docs/large_batch.md). Its layers are held by a Sequential, through which
// cohort::nn::convert_sync_batchnorm can replace the BatchNorms (a member holder would keep
// calling the old layer). 1,200,074 parameters.
struct ConvBnNet : FmnistModel {
  ConvBnNet() {
    using namespace torch::nn;
    layers_ = register_module(
        "layers", Sequential(Conv2d(Conv2dOptions(1, 32, 3)), BatchNorm2d(32), ReLU(),
                             Conv2d(Conv2dOptions(32, 64, 3)), BatchNorm2d(64), ReLU(),
                             MaxPool2d(2), Dropout(0.25), Flatten(), Linear(9216, 128), ReLU(),
                             Dropout(0.5), Linear(128, 10)));
  }
  torch::Tensor forward(torch::Tensor x) override {
    return torch::log_softmax(layers_->forward(x), 1);
  }

  torch::nn::Sequential layers_{nullptr};
};

// fmnist.MLP, 784-1024-1024-10: 1,863,690 parameters.
struct Mlp : FmnistModel {
  Mlp() {
    fc1_ = register_module("fc1", torch::nn::Linear(784, 1024));
    fc2_ = register_module("fc2", torch::nn::Linear(1024, 1024));
    fc3_ = register_module("fc3", torch::nn::Linear(1024, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::flatten(x, 1);
    x = torch::relu(fc1_->forward(x));
    x = torch::relu(fc2_->forward(x));
    return torch::log_softmax(fc3_->forward(x), 1);
  }

  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

// "cnn" or "mlp" (the names ddp_train.py takes), or "cnn_bn"; nullptr for anything else.
inline std::shared_ptr<FmnistModel> make_fmnist_model(const std::string& name) {
  if (name == "cnn") return std::make_shared<ConvNet>();
  if (name == "cnn_bn") return std::make_shared<ConvBnNet>();
  if (name == "mlp") return std::make_shared<Mlp>();
  return nullptr;
}

}  // namespace fashion_mnist
