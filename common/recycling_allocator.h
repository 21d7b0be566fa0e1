// An allocator for std::allocate_shared that keeps a few freed blocks per
// thread and hands them out again, as tcmalloc's per-thread caches do for
// one size class: the held alloc+free pair makes and ends one object record
// (uvm/mem.h) each time, and malloc and free were a tenth of its
// instructions.
//
// Blocks of one element only, and only of the first size and alignment the
// allocator is used with per `Tag` (the shared_ptr's control block with the
// object in it); anything else goes to operator new. A thread keeps at most
// kKeep blocks; what it keeps goes back to operator delete when it exits. A
// block freed on another thread than the one that took it joins that
// thread's list: the lists are per thread, never shared, so no atomic is
// needed. Under AddressSanitizer every block goes to operator new and
// delete, so that a use after free is still caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define UVM_RECYCLE_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UVM_RECYCLE_BLOCKS 0
#endif
#endif
#ifndef UVM_RECYCLE_BLOCKS
#define UVM_RECYCLE_BLOCKS 1
#endif

namespace uvm {

template <typename Tag>
class RecycledBlocks {
public:
    // A training step's replay has hundreds of objects alive: with 64 kept,
    // most of its records came from malloc again (stand-in driver, GPT-2's
    // trace through the PyTorch allocator's calls: 420-429 ns per op, 390-393
    // with 512). At most 512 records of about 450 bytes, per thread.
    static constexpr uint32_t kKeep = 512;

    static void *take(size_t size) {
#if UVM_RECYCLE_BLOCKS
        List &list = t_list;
        if (__builtin_expect(list.head != nullptr && size == list.size, 1)) {
            Block *b = list.head;
            list.head = b->next;
            list.count--;
            return b;
        }
#endif
        return ::operator new(size);
    }

    static void give(void *p, size_t size) {
#if UVM_RECYCLE_BLOCKS
        List &list = t_list;
        if (__builtin_expect(list.size == size && list.count < kKeep, 1)) {
            push(list, p);
            return;
        }
        if (list.size == 0 && size >= sizeof(Block)) {
            // This thread's first block: the list takes this size, and its
            // owner (a thread-local with a destructor, touched only here)
            // frees what the list keeps when the thread exits.
            t_owner.armed = true;
            list.size = size;
            push(list, p);
            return;
        }
#else
        (void)size;
#endif
        ::operator delete(p);
    }

private:
    struct Block {
        Block *next;
    };
    // Trivial, so the fast path's access needs no initialization guard.
    struct List {
        Block *head;
        size_t size;
        uint32_t count;
    };
    struct Owner {
        bool armed = false;
        ~Owner() {
            List &list = t_list;
            while (list.head) {
                Block *b = list.head;
                list.head = b->next;
                ::operator delete(b);
            }
            list.count = 0;
            list.size = SIZE_MAX;  // a block freed later in the thread's exit goes to operator delete
        }
    };
    static void push(List &list, void *p) {
        Block *b = static_cast<Block *>(p);
        b->next = list.head;
        list.head = b;
        list.count++;
    }

    static thread_local List t_list;
    static thread_local Owner t_owner;
};

template <typename Tag>
thread_local typename RecycledBlocks<Tag>::List RecycledBlocks<Tag>::t_list = {nullptr, 0, 0};
template <typename Tag>
thread_local typename RecycledBlocks<Tag>::Owner RecycledBlocks<Tag>::t_owner;

// The allocator itself, for std::allocate_shared<T>(RecyclingAllocator<T, Tag>()).
template <typename T, typename Tag = T>
struct RecyclingAllocator {
    using value_type = T;
    RecyclingAllocator() = default;
    template <typename U>
    RecyclingAllocator(const RecyclingAllocator<U, Tag> &) {}
    template <typename U>
    struct rebind {
        using other = RecyclingAllocator<U, Tag>;
    };

    T *allocate(size_t n) {
        static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks come from operator new");
        if (n == 1)
            return static_cast<T *>(RecycledBlocks<Tag>::take(sizeof(T)));
        return static_cast<T *>(::operator new(n * sizeof(T)));
    }
    void deallocate(T *p, size_t n) {
        if (n == 1)
            RecycledBlocks<Tag>::give(p, sizeof(T));
        else
            ::operator delete(p);
    }
    template <typename U>
    bool operator==(const RecyclingAllocator<U, Tag> &) const { return true; }
    template <typename U>
    bool operator!=(const RecyclingAllocator<U, Tag> &) const { return false; }
};

}  // namespace uvm
