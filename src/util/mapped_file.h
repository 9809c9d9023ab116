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
    bool contains(const uint8_t* p) const { return p >= data_ && p < data_ + size_; }
    // Hands the whole pages of [p, p + n) (inside this map) back to the kernel: unmapped here
    // and dropped from the page cache where no one else maps them (clean pages only; a read
    // brings them back). For an expert store whose RAM budget is below its experts.
    void drop_pages(const uint8_t* p, size_t n) const;

private:
    std::filesystem::path path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    int fd_ = -1;  // kept for posix_fadvise
};

}  // namespace strata
