#include "cli/args.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace memfit::cli {

void Args::add(const std::string& name, std::string* out, const std::string& meta, const std::string& help) {
  opts_.push_back({name, meta, help, true, [out](const std::string& v) {
                     *out = v;
                     return std::string();
                   }});
}

void Args::add(const std::string& name, int64_t* out, const std::string& meta, const std::string& help) {
  opts_.push_back({name, meta, help, true, [out, name](const std::string& v) {
                     char* end = nullptr;
                     errno = 0;
                     long long x = std::strtoll(v.c_str(), &end, 10);
                     if (v.empty() || *end || errno) return "--" + name + " expects an integer, got '" + v + "'";
                     *out = x;
                     return std::string();
                   }});
}

void Args::add(const std::string& name, double* out, const std::string& meta, const std::string& help) {
  opts_.push_back({name, meta, help, true, [out, name](const std::string& v) {
                     char* end = nullptr;
                     errno = 0;
                     double x = std::strtod(v.c_str(), &end);
                     if (v.empty() || *end || errno) return "--" + name + " expects a number, got '" + v + "'";
                     *out = x;
                     return std::string();
                   }});
}

void Args::add_flag(const std::string& name, bool* out, const std::string& help) {
  opts_.push_back({name, "", help, false, [out](const std::string&) {
                     *out = true;
                     return std::string();
                   }});
}

void Args::add_flag(const std::string& name, std::function<void()> on, const std::string& help) {
  opts_.push_back({name, "", help, false, [on](const std::string&) {
                     on();
                     return std::string();
                   }});
}

void Args::add(const std::string& name, std::function<std::string(const std::string&)> parse, const std::string& meta,
               const std::string& help) {
  opts_.push_back({name, meta, help, true, std::move(parse)});
}

void Args::add_positional(const std::string& meta, std::string* out, const std::string& help) {
  positionals_.push_back({meta, help, out});
}

std::optional<std::string> Args::parse(const std::vector<std::string>& argv) {
  size_t npos = 0;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      if (npos < positionals_.size()) {
        *positionals_[npos++].out = a;
        continue;
      }
      return "unexpected argument '" + a + "'";
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Opt* o = nullptr;
    for (auto& x : opts_)
      if (x.name == name) o = &x;
    if (!o) return "unknown flag --" + name;
    if (o->takes_value && !has_value) {
      if (i + 1 >= argv.size()) return "--" + name + " needs a value (" + o->meta + ")";
      value = argv[++i];
    } else if (!o->takes_value && has_value) {
      return "--" + name + " takes no value";
    }
    std::string err = o->set(value);
    if (!err.empty()) return err;
    o->seen = true;
  }
  if (!help_ && npos < positionals_.size()) return "missing " + positionals_[npos].meta;
  return std::nullopt;
}

bool Args::given(const std::string& name) const {
  for (auto& o : opts_)
    if (o.name == name) return o.seen;
  return false;
}

std::string Args::usage() const {
  std::ostringstream s;
  s << "usage: memfit " << command_ << " [options]";
  for (auto& p : positionals_) s << " " << p.meta;
  s << "\n\n" << summary_ << "\n\n";
  for (auto& p : positionals_) {
    std::string left = "  " + p.meta;
    s << left << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << p.help << "\n";
  }
  if (!positionals_.empty()) s << "\n";
  s << "options:\n";
  for (auto& o : opts_) {
    std::string left = "  --" + o.name + (o.meta.empty() ? "" : " " + o.meta);
    s << left;
    if (left.size() < 28) s << std::string(28 - left.size(), ' ');
    else s << "\n" << std::string(28, ' ');
    s << o.help << "\n";
  }
  s << "  -h, --help                show this help\n";
  return s.str();
}

}  // namespace memfit::cli
