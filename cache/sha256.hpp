// sha256.hpp — SHA-256 through libcrypto (OpenSSL), for cache keys and entry checksums.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace nsajit {

using Sha256Digest = std::array<unsigned char, 32>;

Sha256Digest sha256(const void* data, std::size_t size);
inline Sha256Digest sha256(std::string_view text) { return sha256(text.data(), text.size()); }
std::string to_hex(const Sha256Digest& digest);

}  // namespace nsajit
