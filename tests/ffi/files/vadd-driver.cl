; Vector addition through the CUDA driver API, as the llama.lisp paper drives a GPU from C-Lisp:
; cuda.h's declarations come from `include`, the kernel is PTX text loaded with cuModuleLoadData
; and launched with cuLaunchKernel, its arguments an array of pointers to them. The calls resolve
; once `(load-library "libcuda.so.1")` has loaded the driver. The primary context is pushed and
; popped, so Quasi's own launches (which use it too) are left as they were.
(include "stdio.h" (functions printf))
(include "cuda.h"
  (functions cuInit cuDeviceGet cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2 cuCtxPushCurrent_v2
             cuCtxPopCurrent_v2 cuModuleLoadData cuModuleUnload cuModuleGetFunction cuMemAlloc_v2 cuMemFree_v2
             cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuLaunchKernel cuCtxSynchronize)
  (typedefs CUdevice CUcontext CUmodule CUfunction CUdeviceptr CUstream CUDA_SUCCESS)
  (flags "-I/usr/local/cuda/include"))

; c[i] = a[i] + b[i] for i < n, one thread per element.
(define-global (driver-vadd-ptx (ptr int8)))
(set driver-vadd-ptx ".version 7.0
.target sm_52
.address_size 64
.visible .entry vadd_driver(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.s32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.s32 %rd7, %r1, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
")

; The first failing call's status stays in `driver-status`; later calls are skipped.
(define-global (driver-status int))
(define ((ok bool) (status int) (what (ptr int8)))
  (if (ne status ,CUDA_SUCCESS)
      (if (eq driver-status ,CUDA_SUCCESS)
          ((call printf "%s failed: CUresult %d\n" what status) (set driver-status status))))
  (ret (eq driver-status ,CUDA_SUCCESS)))

; c = a + b on the GPU, n floats each; 0 when every call succeeded, else the first CUresult.
(define ((driver-vadd int) (a (ptr float)) (b (ptr float)) (c (ptr float)) (n int))
  (declare device ,CUdevice)
  (declare context ,CUcontext)
  (declare module ,CUmodule)
  (declare kernel ,CUfunction)
  (declare da ,CUdeviceptr)
  (declare db ,CUdeviceptr)
  (declare dc ,CUdeviceptr)
  (declare bytes int64)
  (declare args (arr 4 (ptr int8)))
  (set driver-status ,CUDA_SUCCESS)
  (set bytes (mul (sext n int64) (int64 4)))
  (if (not (call ok (call cuInit 0) "cuInit")) (ret driver-status))
  (call ok (call cuDeviceGet (ptr-to device) 0) "cuDeviceGet")
  (call ok (call cuDevicePrimaryCtxRetain (ptr-to context) device) "cuDevicePrimaryCtxRetain")
  (call ok (call cuCtxPushCurrent_v2 context) "cuCtxPushCurrent")
  (call ok (call cuModuleLoadData (ptr-to module) driver-vadd-ptx) "cuModuleLoadData")
  (call ok (call cuModuleGetFunction (ptr-to kernel) module "vadd_driver") "cuModuleGetFunction")
  (call ok (call cuMemAlloc_v2 (ptr-to da) bytes) "cuMemAlloc")
  (call ok (call cuMemAlloc_v2 (ptr-to db) bytes) "cuMemAlloc")
  (call ok (call cuMemAlloc_v2 (ptr-to dc) bytes) "cuMemAlloc")
  (call ok (call cuMemcpyHtoD_v2 da (bitcast a (ptr int8)) bytes) "cuMemcpyHtoD")
  (call ok (call cuMemcpyHtoD_v2 db (bitcast b (ptr int8)) bytes) "cuMemcpyHtoD")
  (store (aptradd (ptr-to args) 0) (bitcast (ptr-to da) (ptr int8)))
  (store (aptradd (ptr-to args) 1) (bitcast (ptr-to db) (ptr int8)))
  (store (aptradd (ptr-to args) 2) (bitcast (ptr-to dc) (ptr int8)))
  (store (aptradd (ptr-to args) 3) (bitcast (ptr-to n) (ptr int8)))
  (call ok (call cuLaunchKernel kernel (div (add n 255) 256) 1 1 256 1 1 0 (inttoptr (int64 0) ,CUstream)
                 (bitcast (ptr-to args) (ptr (ptr int8))) (inttoptr (int64 0) (ptr (ptr int8))))
        "cuLaunchKernel")
  (call ok (call cuCtxSynchronize) "cuCtxSynchronize")
  (call ok (call cuMemcpyDtoH_v2 (bitcast c (ptr int8)) dc bytes) "cuMemcpyDtoH")
  (call cuMemFree_v2 da)
  (call cuMemFree_v2 db)
  (call cuMemFree_v2 dc)
  (call cuModuleUnload module)
  (call cuCtxPopCurrent_v2 (ptr-to context))
  (call cuDevicePrimaryCtxRelease_v2 device)
  (ret driver-status))
