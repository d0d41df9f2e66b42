#include "codec/predictor.hpp"

namespace ncclz::codec {

template <class Code>
void predict(const Code* q, size_t n, Predictor p, uint32_t W, uint32_t P, Code* r) {
  using U = UCode<Code>;
  switch (p) {
    case Predictor::None:
      for (size_t i = 0; i < n; ++i) r[i] = q[i];
      return;
    case Predictor::Delta1:
      if (n) r[0] = q[0];
      for (size_t i = 1; i < n; ++i) r[i] = Code(U(q[i]) - U(q[i - 1]));
      return;
    case Predictor::Delta2:
      predict_range(q, 0, n < 2 ? n : 2, p, W, P, r);
      for (size_t i = 2; i < n; ++i) r[i] = Code(U(q[i]) - U(2) * U(q[i - 1]) + U(q[i - 2]));
      return;
    default:
      predict_range(q, 0, n, p, W, P, r);
      return;
  }
}

template <class Code>
void reconstruct(const Code* r, size_t n, Predictor p, uint32_t W, uint32_t P, Code* q) {
  using U = UCode<Code>;
  switch (p) {
    case Predictor::None:
      if (q != r)
        for (size_t i = 0; i < n; ++i) q[i] = r[i];
      return;
    case Predictor::Delta1: {
      U acc = 0;
      for (size_t i = 0; i < n; ++i) {
        acc += U(r[i]);
        q[i] = Code(acc);
      }
      return;
    }
    case Predictor::Delta2: {
      U a = 0, b = 0;  // q[i-1], q[i-2]
      for (size_t i = 0; i < n; ++i) {
        const U pred = i >= 2 ? U(U(2) * a - b) : (i == 1 ? a : U(0));
        const U v = U(r[i]) + pred;
        q[i] = Code(v);
        b = a;
        a = v;
      }
      return;
    }
    default:
      // q[i] depends only on q[j < i], which are final when element i is reached.
      for (size_t i = 0; i < n; ++i) q[i] = Code(U(r[i]) + predict_at(q, i, p, W, P));
      return;
  }
}

template void predict<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void predict<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);
template void reconstruct<int32_t>(const int32_t*, size_t, Predictor, uint32_t, uint32_t, int32_t*);
template void reconstruct<int64_t>(const int64_t*, size_t, Predictor, uint32_t, uint32_t, int64_t*);

}  // namespace ncclz::codec
