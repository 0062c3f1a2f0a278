// What a doc snippet marked `<!-- snippet: fragment -->` or `declarations` may use without
// defining it (tests/docs/extract_snippets.py, docs/README conventions in CMakeLists.txt here):
// cohort's headers, libtorch, and the names the docs use for the reader's own program. These
// are only declared: the snippets are compiled, never linked or run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cohort/cohort.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/amp/autocast.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#ifdef COHORT_SNIPPET_MPI
#include "cohort/comm/mpi_comm.h"
#endif
#ifdef COHORT_SNIPPET_NCCL
#include <cuda_runtime_api.h>

#include "cohort/comm/nccl.h"
#endif

// The reader's model, data and loop.
struct Net : torch::nn::Module {
  Net();
  torch::Tensor forward(torch::Tensor x);
};
using SnippetDataset =
    torch::data::datasets::MapDataset<torch::data::datasets::MNIST,
                                      torch::data::transforms::Stack<torch::data::Example<>>>;
using SnippetLoader =
    std::unique_ptr<torch::data::StatelessDataLoader<SnippetDataset, cohort::DistributedSampler>>;

extern std::shared_ptr<Net> model;
extern std::shared_ptr<Net> net;
extern std::shared_ptr<cohort::Group> group;
extern cohort::DistributedDataParallel ddp;
extern torch::optim::SGD optimizer;
extern cohort::DistributedSampler sampler;
extern SnippetDataset dataset;
extern SnippetLoader loader;
extern size_t batch_per_rank;
extern uint64_t epochs;
extern int steps;
extern int rank;
extern int world_size;
extern int accumulation_steps;
extern bool resume;                       // the program's own --resume flag (docs/checkpoints.md)
extern std::vector<torch::Tensor> micro;  // micro-batches
torch::Tensor loss_fn(const torch::Tensor& output);
template <typename Batch>
void train_step(const Batch& batch);

#ifdef COHORT_SNIPPET_MPI
extern MPI_Comm my_comm;
#endif
#ifdef COHORT_SNIPPET_NCCL
extern cudaStream_t my_cuda_stream;
extern void* dev_ptr;
extern size_t n;
#endif
