/* tools/lib/util/backend_load.c: backend_cuda() (kernels/backend.h).  In a CUDA
 * build the backend and the CUDA libraries it needs (cudart, cuBLAS,
 * cuDNN) are one shared object beside the tools, opened only when a tool
 * asks for the GPU: a CPU run maps none of them, and a tool runs where
 * they are absent. */
#include "backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

/* Defined when the backend is linked in (the unit and GPU tests). */
extern const struct backend *backend_cuda_open(char *err, size_t errsz) __attribute__((weak));
extern int backend_cuda_device_count(void) __attribute__((weak));

#ifdef POROS_HAVE_CUDA
/* The symbol name of the backend library beside the tool (opened once), or
 * NULL with the reason in err. */
static void *backend_symbol(const char *name, char *err, size_t errsz)
{
	static void *h;
	char *dir, *path;
	void *sym;

	dir = poros_exe_dir();
	path = xasprintf("%s/" BACKEND_CUDA_SO, dir != NULL ? dir : ".");
	free(dir);
	if (h == NULL && (h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		if (err != NULL && errsz > 0)
			snprintf(err, errsz, "the CUDA backend did not load: %s", dlerror());
		free(path);
		return NULL;
	}
	if ((sym = dlsym(h, name)) == NULL && err != NULL && errsz > 0)
		snprintf(err, errsz, "%s: no %s in it", path, name);
	free(path);
	return sym;
}
#endif

const struct backend *backend_cuda(char *err, size_t errsz)
{
#ifdef POROS_HAVE_CUDA
	static const struct backend *(*open_fn)(char *, size_t);

	if (backend_cuda_open != NULL)
		return backend_cuda_open(err, errsz);
	if (open_fn == NULL && (*(void **)&open_fn = backend_symbol("backend_cuda_open", err, errsz)) == NULL)
		return NULL;
	return open_fn(err, errsz);
#else
	if (backend_cuda_open != NULL)
		return backend_cuda_open(err, errsz);
	if (err != NULL && errsz > 0)
		snprintf(err, errsz, "built without CUDA");
	return NULL;
#endif
}

int backend_cuda_devices(char *err, size_t errsz)
{
	int (*count_fn)(void) = backend_cuda_device_count;
	int n;

#ifdef POROS_HAVE_CUDA
	if (count_fn == NULL && (*(void **)&count_fn = backend_symbol("backend_cuda_device_count", err, errsz)) == NULL)
		return 0;
#else
	if (count_fn == NULL) {
		if (err != NULL && errsz > 0)
			snprintf(err, errsz, "built without CUDA");
		return 0;
	}
#endif
	if ((n = count_fn()) <= 0 && err != NULL && errsz > 0)
		snprintf(err, errsz, "no CUDA device");
	return n > 0 ? n : 0;
}
