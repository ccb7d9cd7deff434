#include "train/run_data.hpp"

#include <filesystem>
#include <ostream>
#include <stdexcept>

#include "data/idx.hpp"
#include "data/image_folder.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

bool has_idx(const std::string& dir) {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte"})
    if (fs::exists(fs::path(dir) / f)) return true;
  return false;
}

}  // namespace

Datasets open_data(const TrainOptions& o, bool stream) {
  Datasets d;
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
