// Byte sizes as memfit reads and prints them: "512MiB" on the command
// line, "123.4 MiB" in the plan. Everyone's: the command, the plan report,
// the budget, the data loaders' messages.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace memfit::train {

// "512MiB", "1GiB", "1.5G", "300MB", "1000000" -> bytes. Binary units for
// K/M/G/T with or without "iB"; "KB/MB/GB" are decimal. nullopt if malformed.
std::optional<size_t> parse_bytes(const std::string& s);
std::string format_bytes(size_t b);     // "123.4 MiB"
std::string format_bytes_up(size_t b);  // the same, rounded up: never less than b (for budgets to ask for)

}  // namespace memfit::train
