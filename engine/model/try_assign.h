// PREFIXD_TRY_ASSIGN(dst, expr): evaluates a Result-returning expr; returns
// its Status from the enclosing function on failure, else moves the value into
// dst. For the weight loaders (model.cpp, qwen35_weights.cpp).
#pragma once

#include <utility>

#define PREFIXD_TRY_ASSIGN(dst, expr) \
  do {                                \
    auto r_ = (expr);                 \
    if (!r_.ok()) return r_.status(); \
    dst = std::move(r_.value());      \
  } while (0)
