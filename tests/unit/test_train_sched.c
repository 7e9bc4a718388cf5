/* tests/unit/test_train_sched.c: the learning-rate schedules (transformers'
 * get_{constant,linear,cosine}_schedule_with_warmup, whose first step uses
 * lr_lambda(0)) and the RoPE tables (HF's inv_freq, with the linear and
 * llama3 rope_scaling). */
#include "test_train_common.h"

static void check_lr(void)
{
	struct train_config c;
	const struct {
		enum lr_schedule sched;
		int warmup, step;
		double want; /* times lr */
	} cases[] = {
		{ LR_CONSTANT, 2, 1, 0.0 },   { LR_CONSTANT, 2, 2, 0.5 },  { LR_CONSTANT, 2, 3, 1.0 },
		{ LR_CONSTANT, 0, 1, 1.0 },   { LR_LINEAR, 2, 2, 0.5 },    { LR_LINEAR, 2, 3, 1.0 },
		{ LR_LINEAR, 2, 6, 0.625 },   { LR_LINEAR, 2, 10, 0.125 }, { LR_COSINE, 0, 1, 1.0 },
		{ LR_COSINE, 0, 6, 0.5 },     { LR_COSINE, 0, 10, 0.5 * (1.0 + cos(M_PI * 0.9)) },
		{ LR_COSINE, 2, 2, 0.5 },     { LR_COSINE, 2, 6, 0.5 * (1.0 + cos(M_PI * 3.0 / 8.0)) },
	};

	train_config_defaults(&c);
	c.cell.training.learning_rate = 1e-3;
	c.cell.training.steps = 10;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		double got;

		c.cell.training.lr_schedule = cases[i].sched;
		c.cell.training.lr_warmup_steps = cases[i].warmup;
		got = lr_at(&c, cases[i].step);
		CHECKF(fabs(got - cases[i].want * 1e-3) < 1e-15, "%s warmup %d step %d: lr %.9g, want %.9g",
		         lr_schedule_names[cases[i].sched], cases[i].warmup, cases[i].step, got, cases[i].want * 1e-3);
	}
	train_config_free(&c);
}

static void check_rope(void)
{
	struct model_config mc;
	float cos_t[4 * 64], sin_t[4 * 64];
	char err[512];

	memset(&mc, 0, sizeof mc);
	mc.model_id = "test";
	mc.head_dim = 16;
	mc.rope_theta = 10000.0;
	CHECKF(rope_tables(cos_t, sin_t, &mc, 4, err, sizeof err) == 0, "%s", err);
	/* position 0 is the identity rotation; inv_freq[1] = 10000^(-2/16) */
	CHECKF(cos_t[0] == 1.0f && sin_t[5] == 0.0f, "position 0: cos %g sin %g", cos_t[0], sin_t[5]);
	CHECKF(fabs(cos_t[3 * 8 + 1] - cos(3 * pow(10000.0, -2.0 / 16))) < 1e-6 &&
	         fabs(sin_t[3 * 8 + 1] - sin(3 * pow(10000.0, -2.0 / 16))) < 1e-6,
	         "position 3, frequency 1: cos %.7g sin %.7g", cos_t[3 * 8 + 1], sin_t[3 * 8 + 1]);

	/* llama3: high frequencies stay, low ones are divided by the factor */
	mc.head_dim = 128;
	mc.rope_theta = 500000.0;
	snprintf(mc.rope_scaling_type, sizeof mc.rope_scaling_type, "llama3");
	mc.rope_scaling_factor = 8;
	mc.rope_low_freq_factor = 1;
	mc.rope_high_freq_factor = 4;
	mc.rope_original_max_position = 8192;
	CHECKF(rope_tables(cos_t, sin_t, &mc, 2, err, sizeof err) == 0, "%s", err);
	CHECKF(sin_t[64 + 0] == sinf(1.0f), "llama3 frequency 0 unchanged: %.9g", sin_t[64]);
	CHECKF(fabs(sin_t[64 + 63] - sin(pow(500000.0, -126.0 / 128) / 8)) < 1e-9, "llama3 frequency 63 / 8: %.9g",
	         sin_t[64 + 63]);
	snprintf(mc.rope_scaling_type, sizeof mc.rope_scaling_type, "linear");
	mc.rope_scaling_factor = 4;
	CHECKF(rope_tables(cos_t, sin_t, &mc, 2, err, sizeof err) == 0 && sin_t[64] == sinf(0.25f),
	         "linear scaling divides every frequency: %.9g", sin_t[64]);
	snprintf(mc.rope_scaling_type, sizeof mc.rope_scaling_type, "yarn");
	CHECKF(rope_tables(cos_t, sin_t, &mc, 2, err, sizeof err) < 0 &&
	         strcmp(err, "test: rope_scaling type \"yarn\" is not supported (poros-train implements default, linear, "
	                     "llama3)") == 0, "yarn: %s", err);
}

int main(void)
{
	set_progname("test_train_sched");
	check_lr();
	check_rope();
	fprintf(stderr, "test_train_sched: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
