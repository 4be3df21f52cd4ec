// Object emission with a code-generation pass pipeline built once per target machine and run
// on every module after it, as `llc -run-twice` does: LLVM's C API builds the pipeline anew for
// every module (LLVMTargetMachineEmitToMemoryBuffer), which costs a small cell more than
// generating its code.
//
// The pipeline writes into a vector it was given when built: cleared before each module, it
// holds that module's object file afterwards. The machine-module information the pipeline
// keeps is reset by its own finalisation after every module.

#include <llvm-c/TargetMachine.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>

namespace {

struct Emitter {
    llvm::TargetMachine *target;
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream stream{buffer};
    llvm::legacy::PassManager passes;
};

}  // namespace

extern "C" {

// A pipeline emitting object files for `machine`, which must outlive it; null if the machine
// cannot emit objects.
void *quasi_emitter_create(LLVMTargetMachineRef machine) {
    auto *target = reinterpret_cast<llvm::TargetMachine *>(machine);
    auto emitter = std::make_unique<Emitter>();
    emitter->target = target;
    // The IR verifier runs first, as in LLVMTargetMachineEmitToMemoryBuffer.
    if (target->addPassesToEmitFile(emitter->passes, emitter->stream, nullptr, llvm::CodeGenFileType::ObjectFile)) {
        return nullptr;
    }
    return emitter.release();
}

// Runs the pipeline on `module`, given the machine's data layout first (as the C API does); the object
// file is then at `*data`, `*size` bytes, valid until the next call or the emitter's end.
void quasi_emitter_emit(void *emitter, LLVMModuleRef module, const char **data, size_t *size) {
    auto *self = static_cast<Emitter *>(emitter);
    llvm::Module *unwrapped = llvm::unwrap(module);
    unwrapped->setDataLayout(self->target->createDataLayout());
    self->buffer.clear();
    self->passes.run(*unwrapped);
    *data = self->buffer.data();
    *size = self->buffer.size();
}

void quasi_emitter_dispose(void *emitter) { delete static_cast<Emitter *>(emitter); }

}  // extern "C"
