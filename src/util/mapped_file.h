// A read-only memory map of a whole file. Pages are only read when touched, so opening a
// 100 GB model costs nothing until its tensors are used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace strata {

class MappedFile {
public:
    // Throws strata::Error "PATH: reason" when the file can't be opened or mapped.
    explicit MappedFile(const std::filesystem::path& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace strata
