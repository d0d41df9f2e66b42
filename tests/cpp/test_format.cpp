// Slice header: docs/FORMAT.md, "Slice header".
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ncclz/codec/format.hpp"

using namespace ncclz::codec;

TEST(Format, HeaderRoundTrip) {
  SliceHeader h;
  h.codec = Codec::Block;
  h.elem_type = ElemType::I64;
  h.predictor = Predictor::Lorenzo3D;
  h.count = 123456;
  h.payload_bytes = 77;
  h.pred_arg0 = 16;
  h.pred_arg1 = 256;
  std::vector<uint8_t> buf(kHeaderBytes + 77);
  write_header(buf.data(), h);
  EXPECT_EQ(buf[0], 'N');
  EXPECT_EQ(buf[1], 'C');
  EXPECT_EQ(buf[2], 'Z');
  EXPECT_EQ(buf[3], '1');
  SliceHeader g;
  ASSERT_EQ(read_header(buf.data(), buf.size(), &g), Status::Ok);
  EXPECT_EQ(g.codec, h.codec);
  EXPECT_EQ(g.elem_type, h.elem_type);
  EXPECT_EQ(g.predictor, h.predictor);
  EXPECT_EQ(g.count, h.count);
  EXPECT_EQ(g.payload_bytes, h.payload_bytes);
  EXPECT_EQ(g.pred_arg0, h.pred_arg0);
  EXPECT_EQ(g.pred_arg1, h.pred_arg1);
}

TEST(Format, HeaderRejectsMalformed) {
  SliceHeader h;
  h.codec = Codec::Raw;
  h.elem_type = ElemType::F32;
  h.count = 4;
  h.payload_bytes = 16;
  std::vector<uint8_t> buf(kHeaderBytes + 16);
  write_header(buf.data(), h);
  SliceHeader g;
  // Every truncation of the slice is refused.
  for (size_t len = 0; len < buf.size(); ++len) EXPECT_NE(read_header(buf.data(), len, &g), Status::Ok) << len;
  auto with = [&](size_t off, uint8_t v) {
    auto b = buf;
    b[off] = v;
    return read_header(b.data(), b.size(), &g);
  };
  EXPECT_EQ(with(0, 'X'), Status::BadMagic);
  EXPECT_EQ(with(3, '2'), Status::BadMagic);
  EXPECT_EQ(with(4, 9), Status::BadHeader);   // unknown codec
  EXPECT_EQ(with(5, 0), Status::BadHeader);   // unknown type
  EXPECT_EQ(with(6, 1), Status::BadHeader);   // RAW with a predictor
  EXPECT_EQ(with(7, 1), Status::BadHeader);   // flags
  EXPECT_EQ(with(4, 1), Status::BadHeader);   // Block on floats
  EXPECT_EQ(with(4, 2), Status::BadHeader);   // Rans on floats
  EXPECT_EQ(with(4, 4), Status::Ok);          // Sparse on floats: their bit patterns, no predictor
  EXPECT_EQ(with(16, 1), Status::BadHeader);  // predictor argument without predictor
}

TEST(Format, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  SliceHeader g;
  int ok = 0;
  for (int it = 0; it < 100000; ++it) {
    uint8_t b[64];
    for (auto& x : b) x = uint8_t(rng());
    if (it % 2) store_u32(b, kSliceMagic);
    size_t len = rng() % 65;
    if (read_header(b, len, &g) == Status::Ok) {
      ++ok;
      EXPECT_LE(kHeaderBytes + g.payload_bytes, len);
    }
  }
  EXPECT_LT(ok, 100);
}
