// _memfit: the Python package's binding to the engine. It holds no logic of
// its own: the flags go through the command's parser (cli/run_args.hpp),
// the run through train::run_training, and what comes back is what the
// command prints (the plan's JSON, the result's fields). memfit/__init__.py
// builds the notebook API on top.
#include <Python.h>
#include <omp.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli/run_args.hpp"
#include "train/memory.hpp"
#include "train/report.hpp"
#include "train/run_report.hpp"
#include "train/train_loop.hpp"
#include "train/trainer.hpp"

namespace py = pybind11;
using namespace memfit;

namespace {

// The command's parser; a usage error is a ValueError with the command's
// message ("unknown flag --colour", "--batch expects an integer, got 'x'").
cli::RunArgs parse(const std::string& command, const std::vector<std::string>& argv) {
  if (command != "train" && command != "plan")
    throw py::value_error("memfit command '" + command + "': expected train or plan");
  cli::RunArgs ra = command == "train" ? cli::parse_train_args(argv) : cli::parse_plan_args(argv);
  if (ra.help) throw py::value_error("help is not an option: see memfit.usage('" + command + "')");
  if (ra.error) throw py::value_error(*ra.error);
  return ra;
}

// A plan or a run in this process takes the threads the command would
// (--threads; else OMP_NUM_THREADS; else every CPU the process may run on),
// not the count another library set for the process's OpenMP: torch sets
// one thread per physical core, which on a machine of 2 hyperthreads is 1,
// and the plan's library heap and the speed follow the thread count. The
// count is put back afterwards, so torch keeps its own.
class CommandThreads {
 public:
  CommandThreads() : saved_(omp_get_max_threads()) { omp_set_num_threads(default_threads()); }
  ~CommandThreads() { omp_set_num_threads(saved_); }
  CommandThreads(const CommandThreads&) = delete;
  CommandThreads& operator=(const CommandThreads&) = delete;

 private:
  static int default_threads() {
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      const int n = std::atoi(env);  // the first of a list such as "4,2"
      if (n > 0) return n;
    }
    return std::max(1, omp_get_num_procs());
  }
  int saved_;
};

// The training log, handed to a Python callable at every flush (the
// progress line redraws at most 10 times a second, each a flush), on the
// thread that runs the loop, with the GIL taken for the call. Each flush is
// also where Python's pending signals run: a KeyboardInterrupt from Ctrl-C
// becomes the loop's stop request (finish the step, write the checkpoint,
// return interrupted), as SIGINT is for the command. Any other exception
// (from the callable, or a signal handler) stops the run the same way and
// is raised once run_training has returned.
class PythonLog : public std::streambuf {
 public:
  explicit PythonLog(py::object sink) : sink_(std::move(sink)) {}
  bool interrupted() const { return interrupted_; }
  // The first exception other than KeyboardInterrupt, to raise after the run.
  std::exception_ptr failure() const { return failure_; }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) text_ += static_cast<char>(c);
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    text_.append(s, static_cast<size_t>(n));
    return n;
  }
  int sync() override {
    py::gil_scoped_acquire gil;
    if (!text_.empty()) {
      PyObject* s = PyUnicode_DecodeUTF8(text_.data(), static_cast<Py_ssize_t>(text_.size()), "replace");
      text_.clear();
      if (s) {
        PyObject* r = PyObject_CallOneArg(sink_.ptr(), s);
        Py_DECREF(s);
        Py_XDECREF(r);
      }
      take_error();
    }
    if (PyErr_CheckSignals() != 0) take_error();
    return 0;
  }

 private:
  py::object sink_;
  std::string text_;
  bool interrupted_ = false;
  std::exception_ptr failure_;

  // The Python error pending now (GIL held), if any, as a stop request.
  void take_error() {
    if (!PyErr_Occurred()) return;
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
      PyErr_Clear();
      interrupted_ = true;
    } else {
      py::error_already_set e;  // fetches and clears it
      if (!failure_) failure_ = std::make_exception_ptr(e);
    }
    train::request_stop(SIGINT);
  }
};

// The command's --json result (train::result_json) as a dict.
py::dict result_dict(const train::TrainResult& r, const train::TrainOptions& o) {
  return py::module_::import("json").attr("loads")(train::result_json(r, o)).cast<py::dict>();
}

}  // namespace

PYBIND11_MODULE(_memfit, m) {
  m.doc() = "memfit's engine: the command's option parser and run_training (use the memfit package)";
  // The plan does not fit and nothing does: the message names the
  // predicted peak, its largest parts and the smallest budget that fits.
  py::register_exception<train::BudgetError>(m, "BudgetError", PyExc_RuntimeError);

  m.def(
      "usage",
      [](const std::string& command) {
        if (command != "train" && command != "plan")
          throw py::value_error("memfit command '" + command + "': expected train or plan");
        return (command == "train" ? cli::parse_train_args({"--help"}) : cli::parse_plan_args({"--help"})).usage;
      },
      py::arg("command"),
      "The command's usage text: every option (a flag --name-with-dashes is the keyword name_with_dashes).");

  m.def(
      "options",
      [](const std::string& command, const std::vector<std::string>& argv) {
        const train::TrainOptions o = parse(command, argv).options;
        py::dict d;
        d["model"] = o.model;
        d["data"] = o.data;
        d["out"] = o.out;
        d["resume"] = o.resume;
        d["batch"] = o.batch;
        d["steps"] = o.steps;
        d["epochs"] = o.epochs;
        d["seed"] = o.seed;
        d["optimizer"] = o.optimizer.kind;
        d["lr"] = o.lr;
        return d;
      },
      py::arg("command"), py::arg("argv"),
      "Parses the flags as `memfit COMMAND` does and returns a few of the resulting options; ValueError on a "
      "usage error.");

  m.def(
      "plan",
      [](const std::vector<std::string>& argv) {
        const train::TrainOptions o = parse("plan", argv).options;
        std::ostringstream log;
        train::TrainResult r;
        {
          py::gil_scoped_release nogil;
          CommandThreads threads;
          r = train::run_training(o, log);
        }
        py::dict d;
        d["json"] = train::report_json(r.report, r.budget);
        d["log"] = log.str();
        return d;
      },
      py::arg("argv"),
      "`memfit plan ARGV --json` in this process: {'json': the plan's JSON text, 'log': what the command prints}.");

  m.def(
      "train",
      [](const std::vector<std::string>& argv, py::object on_text) {
        train::TrainOptions o = parse("train", argv).options;
        o.handle_signals = false;  // Python's handlers stay; PythonLog turns Ctrl-C into a stop request
        PythonLog buf(on_text);
        std::ostream log(&buf);
        // The peak RSS a run reports is its own, as for the command's fresh
        // process, not what the notebook's process reached before it.
        train::reset_peak_rss();
        train::TrainResult r;
        {
          py::gil_scoped_release nogil;
          CommandThreads threads;
          r = train::run_training(o, log);
          log.flush();
        }
        if (buf.failure()) std::rethrow_exception(buf.failure());
        py::dict d = result_dict(r, o);
        // Ctrl-C was pressed: the run stopped early on it ("interrupted"),
        // or it came as the run was finishing anyway.
        d["keyboard_interrupt"] = buf.interrupted();
        return d;
      },
      py::arg("argv"), py::arg("on_text"),
      "`memfit train ARGV` in this process, with the GIL released; on_text(str) receives the log at every flush.");

  m.def(
      "write_report", [](const std::string& dir) { return train::write_run_report(dir); }, py::arg("run_dir"),
      "Writes RUN_DIR/report.html again from the run's files (`memfit report`); returns its path.");

  m.def("format_bytes", &train::format_bytes, py::arg("n"), "Bytes as the plan prints them: '123.4 MiB'.");
}
