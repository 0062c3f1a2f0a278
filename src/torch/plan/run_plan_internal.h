// What plan_run (run_plan.cc), its probe (run_plan_probe.cc) and the online correction
// (plan_correction.cc) share.
#pragma once

#include <vector>

#include "cohort/torch/plan/run_plan.h"

namespace cohort::plan_detail {

// The probe's training step at world 1: plain; then (where PowerSGD may be chosen) through DDP
// over a group of one with PowerSGD and with the plain allreduce, in turns; then (where an FSDP
// strategy may be chosen) through FULL_SHARD over a group of one, whose cost over the plain step
// is FSDP's own compute.
ComputeProfile measure_probe(const RunPlanRequest& request, const PlannerOptions& options);

// Rank 0's choice, by its place among the candidates, on every rank: the ranks plan from the
// same figures, but a last bit of floating-point difference between machines must not split
// them. Collective.
size_t rank0_choice(Group& group, const Plan& plan);

// Whether an FSDP strategy is among the planner's candidates.
bool fsdp_is_a_candidate(const PlannerOptions& options);

// The lower median of `values` (the middle one, or the lower of the two middle ones); 0 when
// empty.
double lower_median(std::vector<double> values);

}  // namespace cohort::plan_detail
