#include "train/run_data.hpp"

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <stdexcept>

#include "data/idx.hpp"
#include "data/image_folder.hpp"
#include "models/model.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

bool has_idx(const std::string& dir) {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"})
    if (fs::exists(fs::path(dir) / f)) return true;
  return false;
}

// A language model's text data.
void open_text(const TrainOptions& o, const models::Model& model, Datasets& d) {
  if (!fs::exists(o.data))
    throw std::runtime_error("no text at " + o.data +
                             (o.data == kFortunesDir ? ": install the Debian packages fortunes and fortunes-min (make deps does) or pass --data FILE.txt|DIR"
                                                     : ": pass --data with a text file or a directory of text files"));
  const int64_t block = o.block_size > 0 ? o.block_size : model.max_sequence;
  if (block <= 0)
    throw std::invalid_argument("model '" + o.model + "' has no sequence length of its own: pass --block-size");
  if (model.max_sequence > 0 && block > model.max_sequence)
    throw std::invalid_argument("--block-size " + std::to_string(block) + " is longer than model '" + o.model +
                                "' takes (" + std::to_string(model.max_sequence) + " tokens)");
  // Each step frees what the next no longer needs: loading peaks at the
  // text twice (documents, then joined) or once plus its token ids, before
  // the plan's arenas exist.
  data::Corpus corpus = data::read_corpus(o.data);
  const size_t files = corpus.files.size(), documents = corpus.documents.size();
  data::EntrySplit split = data::split_entries(std::move(corpus.documents), o.val_fraction, o.seed);
  const size_t held_out = split.held_out.size();
  std::string train_text = data::join_entries(split.train);
  split.train = {};
  std::string val_text = data::join_entries(split.held_out);
  split.held_out = {};
  const fs::path saved = o.resume.empty() ? fs::path() : fs::path(o.resume) / "tokenizer.json";
  auto tok = std::make_shared<data::CharTokenizer>(
      !saved.empty() && fs::exists(saved) ? data::CharTokenizer::load(saved.string())
                                          : data::CharTokenizer::from_texts({train_text, val_text}, o.data));
  auto train_tokens = std::make_shared<std::vector<int32_t>>(tok->encode(train_text, o.data));
  train_text = {};
  const int64_t vocab = static_cast<int64_t>(tok->vocab_size());
  d.train_base = std::make_unique<data::TokenWindows>(train_tokens, block, vocab, o.seed);
  size_t val_tokens = 0;
  if (!val_text.empty()) {
    auto vt = std::make_shared<std::vector<int32_t>>(tok->encode(val_text, o.data));
    val_tokens = vt->size();
    if (static_cast<int64_t>(vt->size()) > block) d.test_base = std::make_unique<data::TokenWindows>(vt, block, vocab);
  }
  d.tokenizer = std::move(tok);
  d.text_note = std::to_string(files) + (files == 1 ? " file, " : " files, ") + std::to_string(documents) +
                " documents (" + std::to_string(held_out) + " held out), " + std::to_string(train_tokens->size()) + " + " +
                std::to_string(val_tokens) + " tokens of a " + std::to_string(vocab) + "-character alphabet";
}

// MNIST-style IDX files or an image folder.
void open_images(const TrainOptions& o, bool stream, Datasets& d) {
  if (!fs::exists(o.data))
    throw std::runtime_error("dataset not found at " + o.data +
                             (o.data == data::kFashionMnistDir ? ": install the Debian package dataset-fashion-mnist (make deps does) or pass --data DIR"
                                                                : ": pass --data with an IDX directory or an image folder"));
  if (has_idx(o.data)) {
    d.idx = true;
    if (stream) {
      data::StreamOptions so;
      so.cache_dir = o.cache_dir;
      so.prepare = false;
      auto tr = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "train", {}, so));
      auto te = std::make_unique<data::StreamedIdxDataset>(data::StreamedIdxDataset::open(o.data, "t10k", {}, so));
      d.train_stream = tr.get();
      d.test_stream = te.get();
      d.train_base = std::move(tr);
      d.test_base = std::move(te);
    } else {
      d.train_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "train"));
      d.test_base = std::make_unique<data::IdxDataset>(data::IdxDataset::open(o.data, "t10k"));
    }
  } else if (fs::is_directory(fs::path(o.data) / "train")) {
    data::ImageFolderOptions io;
    io.channels = o.channels ? static_cast<int>(o.channels) : 3;
    io.height = io.width = o.image_size ? static_cast<int>(o.image_size) : 32;
    d.train_base = std::make_unique<data::ImageFolderDataset>((fs::path(o.data) / "train").string(), io);
    fs::path test = fs::path(o.data) / "test";
    if (!fs::is_directory(test)) test = fs::path(o.data) / "val";
    if (fs::is_directory(test)) d.test_base = std::make_unique<data::ImageFolderDataset>(test.string(), io);
  } else {
    throw std::runtime_error("no dataset recognised at " + o.data +
                             ": expected MNIST-style IDX files (train-images-idx3-ubyte[.gz], ...) or an image folder "
                             "with train/<class>/ (and test/<class>/) subfolders");
  }
}

}  // namespace

void default_text_data(TrainOptions& o) {
  const bool given = std::find(o.given.begin(), o.given.end(), "data") != o.given.end();
  if (given || o.data != data::kFashionMnistDir) return;
  try {
    if (models::resolve(o.model).task == models::Task::LanguageModel) o.data = kFortunesDir;
  } catch (const std::exception&) {
    // a bad model name is reported where the model is built
  }
}

Datasets open_data(const TrainOptions& o, bool stream) {
  Datasets d;
  const models::Model model = models::resolve(o.model);
  if (model.task == models::Task::LanguageModel) {
    open_text(o, model, d);
  } else {
    open_images(o, stream, d);
  }
  d.train = d.train_base.get();
  d.test = d.test_base.get();
  if (!o.subset.empty()) {
    d.train_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.train, data::parse_subset(o.subset), o.seed));
    d.train = d.train_sub.get();
  }
  if (d.test && !o.test_subset.empty()) {
    d.test_sub = std::make_unique<data::Subset>(data::Subset::from_spec(*d.test, data::parse_subset(o.test_subset), o.seed));
    d.test = d.test_sub.get();
  }
  return d;
}

void prepare_streams(Datasets& d, std::ostream& log) {
  for (data::StreamedIdxDataset* s : {d.train_stream, d.test_stream}) {
    if (!s) continue;
    const data::CacheStatus st = s->prepare();
    if (st.action == data::CacheStatus::Built)
      log << "memfit: decompressed " << s->images_path() << " into the dataset cache " << st.path << "\n";
    else if (st.action == data::CacheStatus::Rebuilt)
      log << "memfit: the dataset cache " << st.path << " was unusable (" << st.reason << "); rebuilt it from "
          << s->images_path() << "\n";
  }
}

void describe_data(const Datasets& d, MemoryInputs& mi) {
  mi.data_cache.clear();
  if (d.train_stream) {
    mi.data_in = "disk";
    mi.data_cache = d.train_stream->cache_path();
    mi.data_note = mi.data_cache == d.train_stream->images_path()
                       ? "dataset streamed from disk (raw IDX file: " + mi.data_cache + ")"
                       : "dataset streamed from disk (cache: " + mi.data_cache + ")";
  } else if (d.tokenizer) {
    mi.data_in = "memory";
    mi.data_note = "text in memory (" + d.text_note + ") + loader buffers";
  } else if (d.idx) {
    mi.data_in = "memory";
    mi.data_note = "dataset in memory + loader buffers";
  } else {
    mi.data_in.clear();
    mi.data_note = "images decoded from disk + loader buffers";
  }
}

size_t data_bytes_of(const data::LoaderMemory& train, const data::LoaderMemory& test) {
  return train.total() + test.pipeline() + test.dataset_resident + test.dataset_transient;
}

}  // namespace memfit::train
