#include "checkpoint/optimizer_codec.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"
#include "optim/trust_ratio.h"

namespace cohort::detail {
namespace {

using nlohmann::json;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

template <typename State>
struct TensorField {
  const char* name;
  torch::Tensor (*get)(const State&);
  void (*set)(State&, const torch::Tensor&);
};

// An option of an optimizer as the manifest writes it: each option is named once, and both the
// save (to_json) and the load (from_json) go through the same list.
template <typename Options>
struct OptionField {
  const char* name;
  json (*get)(const Options&);
  void (*set)(Options&, const json&);
};

template <typename Options>
json write_options(const std::vector<OptionField<Options>>& fields, const Options& options) {
  json out = json::object();
  for (const auto& field : fields) out[field.name] = field.get(options);
  return out;
}

template <typename Options>
void read_options(const std::vector<OptionField<Options>>& fields, const json& saved,
                  Options& options) {
  for (const auto& field : fields) field.set(options, saved.at(field.name));
}

// One optimizer class: Traits gives its types, its state tensors and its options.
template <typename Traits>
class Codec final : public OptimizerCodec {
 public:
  using Optimizer = typename Traits::Optimizer;
  using Options = typename Traits::Options;
  using State = typename Traits::State;

  const char* kind() const override { return Traits::kKind; }

  bool matches(const torch::optim::Optimizer& optimizer) const override {
    return dynamic_cast<const Optimizer*>(&optimizer) != nullptr;
  }

  json options_json(const OptimizerOptions& options) const override {
    return write_options(Traits::options(), static_cast<const Options&>(options));
  }

  std::unique_ptr<OptimizerOptions> options_from_json(
      const json& saved, const OptimizerOptions& options) const override {
    auto copy = std::make_unique<Options>(static_cast<const Options&>(options));
    read_options(Traits::options(), saved, *copy);
    return copy;
  }

  FlatState read_state(const OptimizerParamState& state) const override {
    const auto& typed = static_cast<const State&>(state);
    FlatState flat;
    if constexpr (Traits::kHasStep) {
      flat.has_step = true;
      flat.step = typed.step();
    }
    for (const auto& field : Traits::fields()) {
      torch::Tensor tensor = field.get(typed);
      if (tensor.defined()) flat.fields.emplace_back(field.name, std::move(tensor));
    }
    return flat;
  }

  std::unique_ptr<OptimizerParamState> make_state(const FlatState& flat) const override {
    auto state = std::make_unique<State>();
    if constexpr (Traits::kHasStep) state->step(flat.step);
    for (const auto& field : Traits::fields()) {
      for (const auto& [name, tensor] : flat.fields) {
        if (name == field.name) field.set(*state, tensor);
      }
    }
    return state;
  }

  std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups,
      const OptimizerOptions& defaults) const override {
    return std::make_unique<Optimizer>(std::move(groups), static_cast<const Options&>(defaults));
  }
};

// TORCH_ARG accessors, as the function pointers of TensorField.
// clang-format off
#define COHORT_STATE_FIELD(StateType, field)                    \
  TensorField<StateType> {                                      \
    #field,                                                     \
    [](const StateType& s) { return s.field(); },               \
    [](StateType& s, const torch::Tensor& t) { s.field(t); }    \
  }

// A TORCH_ARG option of type Type (double or bool), as an OptionField.
#define COHORT_OPTION(OptionsType, field, Type)                 \
  OptionField<OptionsType> {                                    \
    #field,                                                     \
    [](const OptionsType& o) { return json(o.field()); },       \
    [](OptionsType& o, const json& j) { o.field(j.get<Type>()); } \
  }
// clang-format on

// Adam's and LAMB's betas: a pair, written as a list of two.
template <typename Options>
OptionField<Options> betas_option() {
  return {"betas",
          [](const Options& o) {
            return json{std::get<0>(o.betas()), std::get<1>(o.betas())};
          },
          [](Options& o, const json& j) {
            o.betas(std::make_tuple(j.at(0).get<double>(), j.at(1).get<double>()));
          }};
}

struct SgdTraits {
  using Optimizer = torch::optim::SGD;
  using Options = torch::optim::SGDOptions;
  using State = torch::optim::SGDParamState;
  static constexpr const char* kKind = "SGD";
  static constexpr bool kHasStep = false;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, momentum_buffer)};
  }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double), COHORT_OPTION(Options, momentum, double),
            COHORT_OPTION(Options, dampening, double), COHORT_OPTION(Options, weight_decay, double),
            COHORT_OPTION(Options, nesterov, bool)};
  }
};

// Adam and AdamW keep the same state and options.
template <typename OptimizerType, typename OptionsType, typename StateType>
struct AdamFamilyTraits {
  using Optimizer = OptimizerType;
  using Options = OptionsType;
  using State = StateType;
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, exp_avg), COHORT_STATE_FIELD(State, exp_avg_sq),
            COHORT_STATE_FIELD(State, max_exp_avg_sq)};
  }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double), betas_option<Options>(),
            COHORT_OPTION(Options, eps, double), COHORT_OPTION(Options, weight_decay, double),
            COHORT_OPTION(Options, amsgrad, bool)};
  }
};

struct AdamTraits : AdamFamilyTraits<torch::optim::Adam, torch::optim::AdamOptions,
                                     torch::optim::AdamParamState> {
  static constexpr const char* kKind = "Adam";
};

struct AdamWTraits : AdamFamilyTraits<torch::optim::AdamW, torch::optim::AdamWOptions,
                                      torch::optim::AdamWParamState> {
  static constexpr const char* kKind = "AdamW";
};

struct AdagradTraits {
  using Optimizer = torch::optim::Adagrad;
  using Options = torch::optim::AdagradOptions;
  using State = torch::optim::AdagradParamState;
  static constexpr const char* kKind = "Adagrad";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() { return {COHORT_STATE_FIELD(State, sum)}; }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double), COHORT_OPTION(Options, lr_decay, double),
            COHORT_OPTION(Options, weight_decay, double),
            COHORT_OPTION(Options, initial_accumulator_value, double),
            COHORT_OPTION(Options, eps, double)};
  }
};

struct RmspropTraits {
  using Optimizer = torch::optim::RMSprop;
  using Options = torch::optim::RMSpropOptions;
  using State = torch::optim::RMSpropParamState;
  static constexpr const char* kKind = "RMSprop";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, square_avg), COHORT_STATE_FIELD(State, momentum_buffer),
            COHORT_STATE_FIELD(State, grad_avg)};
  }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double),       COHORT_OPTION(Options, alpha, double),
            COHORT_OPTION(Options, eps, double),      COHORT_OPTION(Options, weight_decay, double),
            COHORT_OPTION(Options, momentum, double), COHORT_OPTION(Options, centered, bool)};
  }
};

struct LarsTraits {
  using Optimizer = optim::Lars;
  using Options = optim::LarsOptions;
  using State = optim::LarsParamState;
  static constexpr const char* kKind = "LARS";
  static constexpr bool kHasStep = false;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, momentum_buffer)};
  }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double),
            COHORT_OPTION(Options, momentum, double),
            COHORT_OPTION(Options, nesterov, bool),
            COHORT_OPTION(Options, weight_decay, double),
            COHORT_OPTION(Options, trust_coefficient, double),
            COHORT_OPTION(Options, eps, double),
            COHORT_OPTION(Options, adapt, bool)};
  }
};

// LAMB's trust_clip: JSON has no infinity, so the unclipped default is written as null.
OptionField<optim::LambOptions> trust_clip_option() {
  return {"trust_clip",
          [](const optim::LambOptions& o) {
            return std::isinf(o.trust_clip()) ? json(nullptr) : json(o.trust_clip());
          },
          [](optim::LambOptions& o, const json& j) {
            o.trust_clip(j.is_null() ? std::numeric_limits<double>::infinity() : j.get<double>());
          }};
}

struct LambTraits {
  using Optimizer = optim::Lamb;
  using Options = optim::LambOptions;
  using State = optim::LambParamState;
  static constexpr const char* kKind = "LAMB";
  static constexpr bool kHasStep = true;
  static std::vector<TensorField<State>> fields() {
    return {COHORT_STATE_FIELD(State, exp_avg), COHORT_STATE_FIELD(State, exp_avg_sq)};
  }
  static std::vector<OptionField<Options>> options() {
    return {COHORT_OPTION(Options, lr, double),
            betas_option<Options>(),
            COHORT_OPTION(Options, eps, double),
            COHORT_OPTION(Options, weight_decay, double),
            trust_clip_option(),
            COHORT_OPTION(Options, adapt, bool)};
  }
};

#undef COHORT_OPTION
#undef COHORT_STATE_FIELD

const std::vector<const OptimizerCodec*>& codecs() {
  static const Codec<SgdTraits> sgd;
  static const Codec<AdamTraits> adam;
  static const Codec<AdamWTraits> adamw;
  static const Codec<AdagradTraits> adagrad;
  static const Codec<RmspropTraits> rmsprop;
  static const Codec<LarsTraits> lars;
  static const Codec<LambTraits> lamb;
  static const std::vector<const OptimizerCodec*> all = {&sgd,     &adam, &adamw, &adagrad,
                                                         &rmsprop, &lars, &lamb};
  return all;
}

}  // namespace

const OptimizerCodec* codec_of(const torch::optim::Optimizer& optimizer) {
  for (const OptimizerCodec* codec : codecs()) {
    if (codec->matches(optimizer)) return codec;
  }
  return nullptr;
}

const OptimizerCodec* codec_named(const std::string& kind) {
  for (const OptimizerCodec* codec : codecs()) {
    if (kind == codec->kind()) return codec;
  }
  return nullptr;
}

const char* known_optimizers() {
  return "SGD, Adam, AdamW, Adagrad, RMSprop, LARS and LAMB";
}

const OptimizerParamState* state_of(const torch::optim::Optimizer& optimizer,
                                    const torch::Tensor& tensor) {
  const auto& state = optimizer.state();
  using Key = typename std::decay_t<decltype(state)>::key_type;
  const auto it = state.find(optim::detail::state_key<Key>(tensor));
  return it == state.end() ? nullptr : it->second.get();
}

void set_state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& tensor,
                  std::unique_ptr<OptimizerParamState> value) {
  auto& state = optimizer.state();
  using Key = typename std::decay_t<decltype(state)>::key_type;
  if (value) {
    state[optim::detail::state_key<Key>(tensor)] = std::move(value);
  } else {
    state.erase(optim::detail::state_key<Key>(tensor));
  }
}

std::unique_ptr<OptimizerParamState> swap_state_of(torch::optim::Optimizer& optimizer,
                                                   const torch::Tensor& tensor,
                                                   std::unique_ptr<OptimizerParamState> value) {
  auto& state = optimizer.state();
  using Key = typename std::decay_t<decltype(state)>::key_type;
  std::unique_ptr<OptimizerParamState>& slot = state[optim::detail::state_key<Key>(tensor)];
  std::swap(slot, value);
  return value;
}

}  // namespace cohort::detail
