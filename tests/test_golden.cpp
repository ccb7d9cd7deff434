// Golden checks against PyTorch (fixtures: tests/golden/make_golden.py):
// the zoo's ConvNet and ResNet-18 reproduce PyTorch's initial weights,
// step-0 logits, loss and gradients and the 20-step losses (golden_check.hpp
// states the tolerances and why).
#include "golden_check.hpp"

using namespace memfit;

TEST(Golden, ConvNetCpu) { run_golden({"convnet", "convnet.safetensors", "fc2.weight", 1e-4, 0.0}, Backend::Cpu); }
TEST(Golden, ResNet18Cpu) { run_golden({"resnet18", "resnet18.safetensors", "fc.weight", 1e-3, 0.0, true}, Backend::Cpu); }
// The scalar reference kernels reproduce PyTorch too (ConvNet: the ResNet-18
// reference run takes minutes).
TEST(Golden, ConvNetReference) {
  run_golden({"convnet", "convnet.safetensors", "fc2.weight", 1e-4, 0.0}, Backend::Reference);
}
// The same through the test devices, whose arenas the host may not address
// (runtime/device.hpp's offset_device): every value the check reads or
// writes goes through the device's copies, and the kernels compute the bits
// they compute on the device they wrap. ResNet-18 runs the CPU kernels
// (minutes on the scalar ones).
TEST(Golden, ConvNetOffsetDevice) {
  run_golden({"convnet", "convnet.safetensors", "fc2.weight", 1e-4, 0.0}, Backend::Reference,
             &device_named("reference-offset"));
}
TEST(Golden, ResNet18OffsetDevice) {
  run_golden({"resnet18", "resnet18.safetensors", "fc.weight", 1e-3, 0.0, true}, Backend::Cpu,
             &device_named("cpu-offset"));
}
// Minutes long on the scalar kernels; run by hand with
// --gtest_also_run_disabled_tests when changing a reference kernel.
TEST(Golden, DISABLED_ResNet18Reference) {
  run_golden({"resnet18", "resnet18.safetensors", "fc.weight", 1e-3, 0.0}, Backend::Reference);
}
