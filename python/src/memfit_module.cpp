// _memfit: the Python package's binding to the engine. It holds no logic of
// its own: the flags go through the command's parser (cli/run_args.hpp),
// the run through train::run_training, and what comes back is what the
// command prints (the plan's JSON, the result's fields). memfit/__init__.py
// builds the notebook API on top.
#include <Python.h>
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli/environment.hpp"
#include "cli/run_args.hpp"
#include "data/array_dataset.hpp"
#include "data/cache_file.hpp"
#include "data/text_classes.hpp"
#include "dist/comm.hpp"
#include "models/model_file.hpp"
#include "ops/conv/cpu.hpp"
#include "base/bytes.hpp"
#include "base/process.hpp"
#include "fit/report.hpp"
#include "report/run_report.hpp"
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
  explicit CommandThreads(int64_t requested) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(requested > 0 ? static_cast<int>(requested) : default_threads());
  }
  ~CommandThreads() { omp_set_num_threads(saved_); }
  CommandThreads(const CommandThreads&) = delete;
  CommandThreads& operator=(const CommandThreads&) = delete;

 private:
  static int default_threads() {
    if (const int n = cli::read_environment().omp_num_threads; n > 0) return n;
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

// A dataset the package built (from arrays in place, or a cache file), or
// labelled texts (a frame's columns) for the model's tokenizer, as the
// Python object memfit passes to train().
struct DataSource {
  std::shared_ptr<const data::ExternalDataset> ds;
  std::shared_ptr<const data::LabelledTexts> texts;

  size_t size() const { return ds ? ds->size() : texts->size(); }
  int classes() const {
    if (ds) return ds->num_classes();
    return static_cast<int>(std::set<std::string>(texts->labels.begin(), texts->labels.end()).size());
  }
  // Into the options in place of --data's files.
  void give(train::TrainOptions& o, bool test) const {
    if (test && ds) o.test_dataset = ds;
    else if (ds) o.train_dataset = ds;
    else if (test) o.test_texts = texts;
    else o.train_texts = texts;
  }
};

// Under mpirun, the process is one rank of the job: the run takes the
// job's size and this rank, rank 0 speaks for the job and the others write
// nothing, and a rank that fails ends the whole job (the others would wait
// for it in their next collective), as the command does.
struct NullBuf : std::streambuf {
  int overflow(int c) override { return c; }
};
bool g_comm_started = false;  // a run asked for the job (and started MPI under mpirun)

// An array's buffer, held (and the array with it) until the last dataset
// reading it goes; released with the GIL, from whichever thread drops it.
struct HeldBuffer {
  py::object owner;
  py::buffer_info info;
};

data::ArrayView view_of(const py::buffer& b, const char* what) {
  auto held = std::make_unique<HeldBuffer>();
  held->owner = b;
  held->info = b.request();
  const py::buffer_info& in = held->info;
  std::string f = in.format;
  const char kind = f.empty() ? '?' : f.back();
  data::ArrayView v;
  if (in.itemsize == 1 && kind == 'B') v.type = data::ElemType::U8;
  else if (in.itemsize == 4 && kind == 'f') v.type = data::ElemType::F32;
  else if (in.itemsize == 4 && (kind == 'i' || kind == 'l')) v.type = data::ElemType::I32;
  else if (in.itemsize == 8 && (kind == 'l' || kind == 'q')) v.type = data::ElemType::I64;
  else
    throw data::DataError(std::string(what) + ": elements of format '" + f + "' (" + std::to_string(in.itemsize) +
                          " bytes): expected uint8 or float32 images, int32 or int64 labels and token ids");
  v.data = static_cast<const std::byte*>(in.ptr);
  v.shape.assign(in.shape.begin(), in.shape.end());
  v.strides.assign(in.strides.begin(), in.strides.end());
  v.keep_alive = std::shared_ptr<const void>(held.release(), [](const void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<const HeldBuffer*>(p);
  });
  return v;
}

// A map-style torch Dataset read item by item as the loader draws it, on
// the loader's thread with the GIL taken for each item: `read(i, epoch)`
// (memfit/_data.py) runs its transforms with the random generators seeded
// from (the run's seed, epoch, i), so a random augmentation is drawn anew
// each epoch and yet a resumed run draws what the uninterrupted one did. It
// returns a float32 C x H x W array and the label, or raises DataError
// naming the index. The Dataset's own memory is the notebook's (in the
// measured baseline); each get() holds one item's tensors in Python's heap
// for a moment (transient_bytes: a few samples' worth).
class PyItems final : public data::ExternalDataset {
 public:
  PyItems(py::object read, data::SampleShape shape, size_t n, int classes, std::string note)
      : read_(std::make_shared<py::object>(std::move(read))), shape_(shape), n_(n), classes_(classes),
        note_(std::move(note)) {}
  ~PyItems() override {
    py::gil_scoped_acquire gil;
    read_.reset();
  }
  size_t size() const override { return n_; }
  int num_classes() const override { return classes_; }
  data::SampleShape sample_shape() const override { return shape_; }
  void get(size_t i, float* out, int32_t* label) const override { read(i, 0, out, label); }
  void get_tensors_at(size_t i, uint64_t epoch, void* const* out) const override {
    read(i, epoch, static_cast<float*>(out[0]), static_cast<int32_t*>(out[1]));
  }
  size_t resident_bytes() const override { return 0; }
  size_t transient_bytes() const override { return 4 * data::sample_numel(shape_) * sizeof(float); }
  std::string note() const override { return note_; }

 private:
  void read(size_t i, uint64_t epoch, float* out, int32_t* label) const {
    if (i >= n_) throw std::out_of_range("PyItems: index " + std::to_string(i) + " >= size " + std::to_string(n_));
    py::gil_scoped_acquire gil;
    try {
      py::tuple r = (*read_)(i, epoch);
      auto a = r[0].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
      if (static_cast<size_t>(a.size()) != data::sample_numel(shape_))
        throw data::DataError("item " + std::to_string(i) + ": " + std::to_string(a.size()) + " values, expected " +
                              std::to_string(data::sample_numel(shape_)));
      std::memcpy(out, a.data(), data::sample_numel(shape_) * sizeof(float));
      const long y = r[1].cast<long>();
      if (y < 0 || y >= classes_)
        throw data::DataError("item " + std::to_string(i) + ": label " + std::to_string(y) + " is outside [0, " +
                              std::to_string(classes_) + ")");
      *label = static_cast<int32_t>(y);
    } catch (py::error_already_set& e) {
      // DataError from read() stays one; anything else names the item.
      const std::string text = py::str(e.value());
      if (e.matches(py::module_::import("memfit._memfit").attr("DataError"))) throw data::DataError(text);
      throw std::runtime_error("item " + std::to_string(i) + " of the Dataset raised " +
                               std::string(py::str(e.type().attr("__name__"))) + ": " + text);
    }
  }
  std::shared_ptr<py::object> read_;
  data::SampleShape shape_;
  size_t n_;
  int classes_;
  std::string note_;
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
  // Bad data from the notebook (data/array_dataset.hpp): the message names
  // the sample's index.
  py::register_exception<data::DataError>(m, "DataError", PyExc_ValueError);
  // A model file memfit cannot import (an ONNX op or pattern it does not
  // take, a corrupt file): the message names the file, the node and its op.
  py::register_exception<models::ModelFileError>(m, "ModelError", PyExc_RuntimeError);

  py::class_<DataSource>(m, "DataSource", "A dataset memfit reads: arrays in place, or a cache file.")
      .def_property_readonly("size", &DataSource::size)
      .def_property_readonly("classes", &DataSource::classes)
      .def_property_readonly("note", [](const DataSource& d) { return d.ds ? d.ds->note() : d.texts->source; })
      .def_property_readonly("file", [](const DataSource& d) { return d.ds ? d.ds->file() : std::string(); })
      .def_property_readonly("resident_bytes", [](const DataSource& d) { return d.ds ? d.ds->resident_bytes() : 0; })
      .def_property_readonly("in_process_bytes",
                             [](const DataSource& d) { return d.ds ? d.ds->in_process_bytes() : 0; })
      .def_property_readonly("fingerprint",
                             [](const DataSource& d) {
                               auto* f = dynamic_cast<const data::ArrayFileDataset*>(d.ds.get());
                               return f ? f->fingerprint() : std::string();
                             })
      .def(
          "sample",
          [](const DataSource& d, size_t i) {
            if (!d.ds || !d.ds->is_image()) throw py::value_error("sample(): an image dataset's");
            const data::SampleShape sh = d.ds->sample_shape();
            py::array_t<float> x({sh[0], sh[1], sh[2]});
            int32_t y = 0;
            d.ds->get(i, x.mutable_data(), &y);
            return py::make_tuple(x, y);
          },
          py::arg("i"), "Sample i as the loader draws it (before augmentation): (float32 C x H x W, label).");

  m.def(
      "array_images",
      [](py::buffer x, py::buffer y, const std::string& layout, int classes, std::vector<float> mean,
         std::vector<float> stddev, const std::string& note) {
        data::ArrayView xv = view_of(x, "x"), yv = view_of(y, "y");
        const size_t axes = layout == "NHW" ? 3 : 4;
        if (xv.shape.size() != axes)
          throw data::DataError("x: layout " + layout + " needs " + std::to_string(axes) + " axes, x has " +
                                std::to_string(xv.shape.size()));
        if (layout == "NHWC") {
          xv.shape = {xv.shape[0], xv.shape[3], xv.shape[1], xv.shape[2]};
          xv.strides = {xv.strides[0], xv.strides[3], xv.strides[1], xv.strides[2]};
        } else if (layout == "NHW") {
          xv.shape = {xv.shape[0], 1, xv.shape[1], xv.shape[2]};
          xv.strides = {xv.strides[0], 0, xv.strides[1], xv.strides[2]};
        } else if (layout != "NCHW") {
          throw py::value_error("layout '" + layout + "': expected NCHW, NHWC or NHW");
        }
        data::Normalize n;
        if (!mean.empty()) n.mean = std::move(mean);
        if (!stddev.empty()) n.stddev = std::move(stddev);
        DataSource d;
        py::gil_scoped_release nogil;  // the checks scan every value
        d.ds = std::make_shared<data::ArrayImages>(std::move(xv), std::move(yv), classes, n, note);
        return d;
      },
      py::arg("x"), py::arg("y"), py::arg("layout"), py::arg("classes"), py::arg("mean"), py::arg("std"),
      py::arg("note"),
      "Images read in place (no copy): x uint8 or float32 in LAYOUT, y int labels in [0, classes). uint8 pixels are "
      "normalised per channel with mean/std; DataError names a bad index.");

  m.def(
      "array_tokens",
      [](py::buffer x, py::buffer y, int classes, int64_t vocab, int32_t pad_id, const std::string& note,
         std::optional<py::buffer> mask) {
        data::ArrayView xv = view_of(x, "x"), yv = view_of(y, "y");
        std::optional<data::ArrayView> mv;
        if (mask) mv = view_of(*mask, "attention_mask");
        DataSource d;
        py::gil_scoped_release nogil;
        d.ds = std::make_shared<data::ArrayTokens>(std::move(xv), std::move(yv), classes, vocab, pad_id, note,
                                                   std::move(mv));
        return d;
      },
      py::arg("x"), py::arg("y"), py::arg("classes"), py::arg("vocab"), py::arg("pad_id"), py::arg("note"),
      py::arg("mask") = std::nullopt,
      "Token ids [N, T] (int32/int64) and labels read in place; an example's length is T less its trailing pad_id, "
      "or, with mask [N, T] (1 for a token, 0 for padding, the ones first), its mask's ones.");

  m.def(
      "labelled_texts",
      [](const std::vector<std::string>& texts, const std::vector<std::string>& labels, const std::string& source) {
        if (texts.size() != labels.size())
          throw data::DataError(source + ": " + std::to_string(texts.size()) + " texts but " +
                                std::to_string(labels.size()) + " labels: they must have the same length");
        if (texts.empty()) throw data::DataError(source + ": no examples");
        for (size_t i = 0; i < texts.size(); ++i) {
          if (texts[i].empty()) throw data::DataError(source + ": the text at index " + std::to_string(i) + " is empty");
          if (labels[i].empty())
            throw data::DataError(source + ": the label at index " + std::to_string(i) + " is empty");
        }
        auto t = std::make_shared<data::LabelledTexts>();
        t->texts = texts;
        t->labels = labels;
        t->source = source;
        DataSource d;
        d.texts = std::move(t);
        return d;
      },
      py::arg("texts"), py::arg("labels"), py::arg("source"),
      "Labelled texts (UTF-8 strings; labels as strings, an integer as its digits) that the model's tokenizer "
      "encodes as it does a JSONL file's; DataError names an empty text or label.");

  m.def(
      "array_file",
      [](const std::string& path, const std::string& note) {
        DataSource d;
        d.ds = data::ArrayFileDataset::open(path, note);
        return d;
      },
      py::arg("path"), py::arg("note"), "memfit's array cache file (a materialised torch Dataset), checked and opened.");

  m.def(
      "dataset_items",
      [](py::object read, std::vector<int> shape, size_t n, int classes, const std::string& note) {
        if (shape.size() != 3) throw py::value_error("dataset_items: shape is C, H, W");
        DataSource d;
        d.ds = std::make_shared<PyItems>(std::move(read), data::SampleShape{shape[0], shape[1], shape[2]}, n, classes,
                                         note);
        return d;
      },
      py::arg("read"), py::arg("shape"), py::arg("n"), py::arg("classes"), py::arg("note"),
      "A Dataset read item by item on the loader's thread: read(i, epoch) -> (float32 C x H x W, label).");

  m.def(
      "default_cache_dir", [] { return cli::read_environment().cache_dir; },
      "The cache directory when none is given ($MEMFIT_CACHE_DIR, $XDG_CACHE_HOME/memfit, ~/.cache/memfit).");

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
      [](const std::vector<std::string>& argv, const DataSource* train_data, const DataSource* test_data) {
        train::TrainOptions o = parse("plan", argv).options;
        if (train_data) train_data->give(o, false);
        if (test_data) test_data->give(o, true);
        std::ostringstream log;
        train::TrainResult r;
        {
          py::gil_scoped_release nogil;
          CommandThreads threads(o.threads);
          kernels::cpu::choose_bf16_convs(o.bf16_convs);
          kernels::cpu::choose_winograd(o.winograd);
          r = train::run_training(o, log);
        }
        py::dict d;
        d["json"] = train::report_json(r.report, r.budget);
        d["log"] = log.str();
        return d;
      },
      py::arg("argv"), py::arg("train_data") = nullptr, py::arg("test_data") = nullptr,
      "`memfit plan ARGV --json` in this process: {'json': the plan's JSON text, 'log': what the command prints}.");

  m.def(
      "train",
      [](const std::vector<std::string>& argv, py::object on_text, const DataSource* train_data,
         const DataSource* test_data) {
        train::TrainOptions o = parse("train", argv).options;
        if (train_data) train_data->give(o, false);
        if (test_data) test_data->give(o, true);
        o.handle_signals = false;  // Python's handlers stay; PythonLog turns Ctrl-C into a stop request
        dist::Comm& comm = cli::start_job(cli::read_environment());  // MPI_Init under mpirun
        g_comm_started = true;
        o.ranks = comm.size();
        o.rank = comm.rank();
        o.ranks_here = comm.local_size();
        try {
          train::validate(o);  // what several ranks refuse
        } catch (const std::invalid_argument& e) {
          throw py::value_error(e.what());
        }
        PythonLog buf(on_text);
        NullBuf nothing;
        std::ostream log(comm.rank() > 0 ? static_cast<std::streambuf*>(&nothing) : &buf);
        // The peak RSS a run reports is its own, as for the command's fresh
        // process, not what the notebook's process reached before it.
        train::reset_peak_rss();
        train::TrainResult r;
        {
          py::gil_scoped_release nogil;
          CommandThreads threads(o.threads);
          kernels::cpu::choose_bf16_convs(o.bf16_convs);
          kernels::cpu::choose_winograd(o.winograd);
          try {
            r = train::run_training(o, log);
          } catch (const std::exception& e) {
            if (!comm.distributed()) throw;
            std::cerr << "memfit (" << comm.describe() << "): " << e.what() << std::endl;
            comm.abort(1);
          }
          log.flush();
        }
        if (buf.failure()) {
          if (comm.distributed()) {
            std::cerr << "memfit (" << comm.describe() << "): the progress callable raised; ending the job" << std::endl;
            comm.abort(1);
          }
          std::rethrow_exception(buf.failure());
        }
        py::dict d = result_dict(r, o);
        // Ctrl-C was pressed: the run stopped early on it ("interrupted"),
        // or it came as the run was finishing anyway.
        d["keyboard_interrupt"] = buf.interrupted();
        return d;
      },
      py::arg("argv"), py::arg("on_text"), py::arg("train_data") = nullptr, py::arg("test_data") = nullptr,
      "`memfit train ARGV` in this process (train_data/test_data: DataSources in place of --data's files), with the GIL released; on_text(str) receives the log at every flush.");

  m.def(
      "write_report", [](const std::string& dir) { return train::write_run_report(dir); }, py::arg("run_dir"),
      "Writes RUN_DIR/report.html again from the run's files (`memfit report`); returns its path.");

  // MPI ends with the interpreter (the job's ranks each finalize once).
  m.def(
      "finalize",
      [] {
        if (g_comm_started) dist::Comm::world().finalize();
      },
      "Ends MPI if a run under mpirun started it.");
  py::module_::import("atexit").attr("register")(m.attr("finalize"));

  m.def("format_bytes", &train::format_bytes, py::arg("n"), "Bytes as the plan prints them: '123.4 MiB'.");
}
