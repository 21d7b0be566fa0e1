// Stand-in declarations, written for tests/python/check_torch_ext.py: the
// parts of PyTorch's C++ allocator interface (2.11) that
// python/uvm/_torch_ext.cpp uses, enough to compile that file's syntax and
// its own names for every feature set where PyTorch is not installed (CI).
// Not PyTorch's code; the real interface is checked where PyTorch is (the
// GPU machine: uvm.torch.enable() builds the extension against it).
#pragma once
#include <stdexcept>
#include <string>
#include <cstdint>
namespace c10 {
struct SourceLocation { const char *function; const char *file; uint32_t line; };
struct Error : std::exception { Error(SourceLocation, std::string) {} const char *what() const noexcept override { return ""; } };
struct OutOfMemoryError : Error { using Error::Error; };
}
#define TORCH_CHECK(cond, ...) do { if (!(cond)) throw ::c10::Error({__func__, __FILE__, 0}, ""); } while (0)
#define C10_CUDA_CHECK(x) (void)(x)
