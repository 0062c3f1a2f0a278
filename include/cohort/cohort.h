// Umbrella header: everything a user of cohort's collectives needs.
#pragma once

#include "cohort/comm/buffer.h"
#include "cohort/comm/calibration.h"
#include "cohort/comm/group.h"
#include "cohort/comm/init.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/memory_store.h"
#include "cohort/comm/options.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/store.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/comm/tcp_transport.h"
#include "cohort/comm/work.h"
#include "cohort/core/dtype.h"
#include "cohort/core/error.h"
