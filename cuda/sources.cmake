# The device code's sources: one list for the CUDA build (cuda/CMakeLists.txt)
# and for the CPU emulator that builds the same files as host code
# (tools/cuda_emu/CMakeLists.txt), so that neither can miss a file.
file(GLOB NCCLZ_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)
