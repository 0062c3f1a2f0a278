// Built against the unpacked Debian package with pkg-config's `cohort` flags: a DDP step of a
// linear model in a world of one, whose gradient must equal the closed form.
#include <cohort/cohort.h>
#include <cohort/torch/ddp/ddp.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  auto group = cohort::init();  // no launcher variables: a world of one
  auto model = torch::nn::Linear(torch::nn::LinearOptions(2, 1).bias(false));
  {
    torch::NoGradGuard no_grad;
    model->weight.fill_(1.0);
  }
  cohort::DistributedDataParallel ddp(model, group);
  auto loss = model->forward(torch::ones({4, 2})).sum();  // d loss / d w = 4 for each weight
  loss.backward();
  const float grad = model->weight.grad()[0][1].item<float>();
  std::printf("torch consumer: world %d, gradient %g\n", group->size(), grad);
  return group->size() == 1 && grad == 4.0f ? 0 : 1;
}
