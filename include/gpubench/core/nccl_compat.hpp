#pragma once
// What the NCCL headers this build compiles against offer: the one place for NCCL version
// checks. Features also need the loaded library to be new enough (ncclGetVersion at run time).
#include <nccl.h>

// fp8 types (ncclFloat8e4m3, ncclFloat8e5m2): NCCL 2.24.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#define GPB_NCCL_HAS_FP8 1
#else
#define GPB_NCCL_HAS_FP8 0
#endif
#define GPB_NCCL_FP8_MIN_VERSION NCCL_VERSION(2, 24, 0)

// ncclAlltoAll: NCCL 2.28.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define GPB_NCCL_HAS_ALLTOALL 1
#else
#define GPB_NCCL_HAS_ALLTOALL 0
#endif
#define GPB_NCCL_ALLTOALL_MIN_VERSION NCCL_VERSION(2, 28, 0)

// ncclCommWindowRegister (NCCL_WIN_COLL_SYMMETRIC) and ncclConfig_t::CTAPolicy: NCCL 2.27.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define GPB_NCCL_HAS_WINDOWS 1
#else
#define GPB_NCCL_HAS_WINDOWS 0
#endif
#define GPB_NCCL_WINDOWS_MIN_VERSION NCCL_VERSION(2, 27, 0)
