// Test helper shared by the GoogleTest files of the data types: the schedules
// a reducing call can take, each made by a configuration, with the algorithm
// its all_reduce runs at 5 and at 700 elements per rank and block.
#pragma once

#include "ncclz/communicator.hpp"

namespace ncclz_test {

struct Schedule {
  const char* name;
  int nranks;
  void (*tweak)(int, ncclz::CommConfig&);
  ncclz::Algorithm small, large;
};

inline const Schedule kSchedules[] = {
    {"ring", 3,
     [](int, ncclz::CommConfig& c) {
       c.algorithm = "ring";
       c.latency_bytes = 0;
       c.direct_from_bytes = 0;
     },
     ncclz::Algorithm::Ring, ncclz::Algorithm::Ring},
    {"latency", 3, [](int, ncclz::CommConfig& c) { c.direct_from_bytes = 0; }, ncclz::Algorithm::Latency,
     ncclz::Algorithm::Ring},
    {"direct", 4,
     [](int, ncclz::CommConfig& c) {
       c.latency_bytes = 128;
       c.direct_from_bytes = 1;  // two hops direct (the latency algorithm's)
     },
     ncclz::Algorithm::Latency, ncclz::Algorithm::Latency},
    {"hierarchical", 4,
     [](int, ncclz::CommConfig& c) {
       c.topo_hosts = "2x2";
       c.latency_bytes = 0;
       c.direct_from_bytes = 0;
     },
     ncclz::Algorithm::Hierarchical, ncclz::Algorithm::Hierarchical},
};

}  // namespace ncclz_test
