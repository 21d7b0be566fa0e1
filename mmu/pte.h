// What one page table entry says: where a GPU virtual page lives.
#pragma once

#include <cstdint>

namespace uvm::mmu {

// The apertures of a GPU PTE (nvidia-uvm's uvm_aperture_t): the GPU's own
// vidmem, a peer GPU's vidmem over the peer link, or host memory.
enum class Aperture : uint8_t { Invalid = 0, Vid = 1, Peer = 2, Sys = 3 };

struct Pte {
    uint64_t address = 0;  // physical (Vid, Peer) or DMA (Sys) address of the page
    Aperture aperture = Aperture::Invalid;
    uint8_t peer_gpu = 0;  // owner GPU for Aperture::Peer

    bool valid() const { return aperture != Aperture::Invalid; }
};

// The answer of a page tree walk for one virtual address.
struct Translation {
    uint64_t address = 0;    // physical/DMA address of the byte asked for
    uint64_t page_size = 0;  // size of the page that maps it
    uint64_t page_offset = 0;
    Aperture aperture = Aperture::Invalid;
    uint8_t peer_gpu = 0;
};

}  // namespace uvm::mmu
