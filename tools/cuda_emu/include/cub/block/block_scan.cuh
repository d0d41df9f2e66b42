// Emulator stand-in (tools/cuda_emu/include/cuda_emu.hpp).
#pragma once
#include "cuda_emu.hpp"
