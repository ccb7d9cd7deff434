// A small command-line parser: typed options bound to variables, generated
// usage text, and errors that name the flag. `--flag value` and
// `--flag=value` are both accepted.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memfit::cli {

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  void add(const std::string& name, std::string* out, const std::string& meta, const std::string& help);
  void add(const std::string& name, int64_t* out, const std::string& meta, const std::string& help);
  void add(const std::string& name, double* out, const std::string& meta, const std::string& help);
  void add_flag(const std::string& name, bool* out, const std::string& help);
  void add_flag(const std::string& name, std::function<void()> on, const std::string& help);
  // Custom parser: returns an error message, or empty on success.
  void add(const std::string& name, std::function<std::string(const std::string&)> parse, const std::string& meta,
           const std::string& help);

  // A positional argument (in the order added): required, named `meta` in
  // the usage line and in the error when it is missing.
  void add_positional(const std::string& meta, std::string* out, const std::string& help);

  // Returns an error message ("unknown flag --x", "--batch expects an
  // integer, got 'abc'"), or nullopt on success. Sets help_requested() on -h/--help.
  std::optional<std::string> parse(const std::vector<std::string>& argv);
  bool help_requested() const { return help_; }
  bool given(const std::string& name) const;
  std::string usage() const;

 private:
  struct Opt {
    std::string name, meta, help;
    bool takes_value = true;
    std::function<std::string(const std::string&)> set;
    bool seen = false;
  };
  std::string command_, summary_;
  std::vector<Opt> opts_;
  struct Positional {
    std::string meta, help;
    std::string* out;
  };
  std::vector<Positional> positionals_;
  bool help_ = false;
};

}  // namespace memfit::cli
