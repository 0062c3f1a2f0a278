// The comm layer's own way to the machinery behind a Group (group_impl.h): the group factories
// of the backends and split reach it here; users never see it (Group::Impl is not public).
#pragma once

#include "cohort/comm/group.h"

namespace cohort {

namespace detail {
struct GroupAccess {
  static Group::Impl& impl(Group& group) { return *group.impl_; }
};
}  // namespace detail

inline Group::Impl& impl_of(Group& group) {
  return detail::GroupAccess::impl(group);
}

}  // namespace cohort
