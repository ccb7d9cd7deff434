// CIFAR's files as they come: read as a python-pickle batch of CIFAR-10 and
// of CIFAR-100 (data/pickle.hpp's bounded opcode reader, then the batch's
// structure, labels and pixels), as a bare pickle (the meta files), and as
// binary records of both datasets.
#include "data/cifar.hpp"
#include "data/pickle.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using memfit::data::CifarKind;
  const std::string& path = memfit::fuzz::input_file(data, size);
  memfit::fuzz::run_one([&] { memfit::data::pickle::read(path); });
  for (CifarKind kind : {CifarKind::Cifar10, CifarKind::Cifar100})
    for (bool binary : {false, true})
      memfit::fuzz::run_one([&] { memfit::data::read_cifar_batch(path, kind, binary); });
  return 0;
}
