# %% [markdown]
# # Knowledge distillation: a small student taught by a large teacher
#
# Distillation (Hinton, Vinyals and Dean, Distilling the Knowledge in a Neural Network, 2015)
# trains a small *student* to match a large *teacher*'s output distribution as well as the labels.
# The teacher's probabilities are softened with a temperature T, `softmax(z / T)`, so the small
# probabilities it gives wrong classes (a 3 that looks a bit like an 8) carry information; the
# student minimizes
#
#     loss = (1 - alpha) * CE(student, label) + alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T))
#
# (the T^2 keeps the soft term's gradients at the same scale as T changes). Every training step
# runs the teacher forward too: the cost moves into training, and inference pays only for the
# student.
#
# Measured here on the digits: the teacher (256-unit MLP), a 16-unit student trained alone, and the
# student distilled, over several seeds, with a temperature sweep; in two regimes: every training
# label available, and only 10% of the labels (the teacher, trained on all of them, labels the rest
# softly: the transfer set of the paper).
#
# The teacher is trained in this run, with the recipe the other T5 demos load from the model cache
# (same seed, epochs and optimizer), so that its training time is this run's, beside the students'.

# %%
import copy

import numpy as np
import torch
import torch.nn.functional as F

from demos.harness.run import start
from demos.t5_compression._model import MLP, accuracy, digits, fit, n_params

run = start(
    "distillation",
    title="Knowledge distillation: teacher, student alone, distilled student, temperature",
    sizes={  # (seeds, temperatures, student epochs)
        "tiny": ([0, 1], [1.0, 4.0], 30),
        "small": ([0, 1, 2], [1.0, 2.0, 4.0, 8.0], 30),
        "full": ([0, 1, 2], [1.0, 2.0, 4.0, 8.0], 30),  # 3 seeds state the spread (min, mean, max)
    },
    cpu_threads=1,
)
seeds, temperatures, epochs = run.sizes
TEACHER_HIDDEN, STUDENT_HIDDEN, TEACHER_EPOCHS, ALPHA, LABELED = 256, 16, 30, 0.5, 0.10
x_tr, y_tr, x_te, y_te = digits()
# One throwaway epoch first, so that no timed training pays the process's first-call costs (autograd, Adam's
# state, the allocator); then the teacher, trained() without its cache.
fit(MLP(STUDENT_HIDDEN), x_tr, y_tr, 1, 0)
torch.manual_seed(0)
teacher = MLP(TEACHER_HIDDEN)
teacher_info = fit(teacher, x_tr, y_tr, TEACHER_EPOCHS, 0)
teacher_acc = accuracy(teacher, x_te, y_te)


def kd_loss(temperature: float, alpha: float = ALPHA):
    def loss(logits, xb, yb):
        with torch.no_grad():
            t = teacher(xb)
        soft = F.kl_div(F.log_softmax(logits / temperature, -1), F.log_softmax(t / temperature, -1),
                        log_target=True, reduction="batchmean") * temperature**2
        labeled = yb >= 0  # -1 marks an image whose label the student may not see
        hard = F.cross_entropy(logits[labeled], yb[labeled]) if labeled.any() else logits.sum() * 0
        return (1 - alpha) * hard + alpha * soft
    return loss


# %% [markdown]
# ## Correctness of the loss
#
# At alpha = 1 the loss is zero when the student's logits equal the teacher's (at any T), and its
# soft term equals T^2 times the KL divergence computed from the probabilities in float64.

# %%
with torch.no_grad():
    xb = x_tr[:32]
    t_logits = teacher(xb)
    for T in (1.0, 4.0):
        same = kd_loss(T, alpha=1.0)(t_logits.clone(), xb, y_tr[:32])
        run.check(f"kd_loss.zero_when_equal.T{int(T)}", abs(float(same)) < 1e-6, f"loss {float(same):.2e} at T={T}")
        s_logits = torch.randn(32, 10)
        p, q = F.softmax(t_logits.double() / T, -1), F.softmax(s_logits.double() / T, -1)
        kl = float((p * (p.log() - q.log())).sum(-1).mean() * T**2)
        run.check_close(f"kd_loss.soft_term.T{int(T)}", kd_loss(T, alpha=1.0)(s_logits, xb, y_tr[:32]),
                        torch.tensor(kl), rtol=1e-4, atol=1e-6, reference_name="T^2 KL(p_teacher || p_student), float64")

# %% [markdown]
# ## Teacher vs student alone vs distilled student, over seeds and temperatures

# %%
keep = torch.zeros(len(y_tr), dtype=torch.bool)
keep[torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(7))[: int(LABELED * len(y_tr))]] = True
y_few = torch.where(keep, y_tr, torch.full_like(y_tr, -1))
acc = {}  # (regime, variant) -> [accuracy per seed]
cost = {}
for seed in seeds:
    for regime in ("all_labels", "few_labels"):
        torch.manual_seed(seed)
        alone = MLP(STUDENT_HIDDEN)
        if regime == "all_labels":
            info = fit(alone, x_tr, y_tr, epochs, seed)
        else:  # alone: only the labeled 10%, with as many optimizer steps as the distilled student gets
            info = fit(alone, x_tr[keep], y_tr[keep], int(epochs / LABELED), seed)
        acc.setdefault((regime, "alone"), []).append(accuracy(alone, x_te, y_te))
        cost.setdefault((regime, "alone"), []).append(info["train_s"])
        for T in (temperatures if regime == "all_labels" else [4.0]):
            torch.manual_seed(seed)
            student = MLP(STUDENT_HIDDEN)
            info = fit(student, x_tr, y_tr if regime == "all_labels" else y_few, epochs, seed, loss_fn=kd_loss(T))
            acc.setdefault((regime, f"distilled_T{int(T)}"), []).append(accuracy(student, x_te, y_te))
            cost.setdefault((regime, f"distilled_T{int(T)}"), []).append(info["train_s"])
    run.log(f"  seed {seed}: " + ", ".join(f"{r}/{v} {a[-1]:.4f}" for (r, v), a in acc.items()))

rows = []
for (regime, variant), values in acc.items():
    run.metric(f"{regime}.{variant}.acc", float(np.mean(values)), "fraction",
               label=f"{regime}, student {variant}: held-out accuracy, mean of {len(seeds)} seeds")
    run.metric(f"{regime}.{variant}.acc_min", min(values), "fraction", label=f"{regime}, {variant}: worst seed")
    run.metric(f"{regime}.{variant}.acc_max", max(values), "fraction", label=f"{regime}, {variant}: best seed")
    run.metric(f"{regime}.{variant}.train_s", float(np.mean(cost[regime, variant])), "s",
               label=f"{regime}, {variant}: training time")
    rows.append([regime, variant, round(float(np.mean(values)), 4), round(min(values), 4), round(max(values), 4),
                 round(float(np.mean(cost[regime, variant])), 2)])
run.table("students", f"16-unit student, held-out accuracy over {len(seeds)} seeds (teacher: {100 * teacher_acc:.1f}%)",
          ["regime", "student", "mean", "min", "max", "train s"], rows)
best_T = max(temperatures, key=lambda T: np.mean(acc["all_labels", f"distilled_T{int(T)}"]))
acc_best, acc_alone = np.mean(acc["all_labels", f"distilled_T{int(best_T)}"]), np.mean(acc["all_labels", "alone"])
run.series("temperature", f"Distilled student, all labels: best T = {best_T:g} gives {acc_best:.1%}, "
           f"alone {acc_alone:.1%}", "temperature T",
           "held-out accuracy", {"distilled (mean)": (temperatures, [float(np.mean(acc["all_labels", f"distilled_T{int(T)}"]))
                                                                    for T in temperatures]),
                                 "distilled (worst seed)": (temperatures, [min(acc["all_labels", f"distilled_T{int(T)}"])
                                                                          for T in temperatures])},
           hlines={"student alone (mean)": float(np.mean(acc["all_labels", "alone"])), "teacher": teacher_acc})
for regime in ("all_labels", "few_labels"):
    best_t = 4 if regime == "few_labels" else max(temperatures, key=lambda T: np.mean(acc[regime, f"distilled_T{int(T)}"]))
    gains = [d - a for d, a in zip(acc[regime, f"distilled_T{int(best_t)}"], acc[regime, "alone"])]
    run.metric(f"{regime}.gain_min", min(gains), "fraction", label=f"{regime}: distilled (T={best_t:g}) minus alone, worst seed")
    run.metric(f"{regime}.gain_mean", float(np.mean(gains)), "fraction", label=f"{regime}: distilled (T={best_t:g}) minus alone, mean")

# what temperature does to the teacher's targets: the probability mass off the top class
with torch.no_grad():
    logits = teacher(x_tr)
for T in temperatures:
    off_top = float(1 - F.softmax(logits / T, -1).max(-1).values.mean())
    run.metric(f"teacher.off_top_mass.T{int(T)}", off_top, "fraction",
               label=f"teacher's probability outside its top class at T={T:g} (training images, mean)")

# %% [markdown]
# ## Size, latency and training cost

# %%
run.metric("teacher.acc", teacher_acc, "fraction", label="teacher, held-out accuracy")
run.metric("teacher.params", n_params(teacher), "parameters", label="teacher parameters", origin="computed")
run.metric("student.params", n_params(MLP(STUDENT_HIDDEN)), "parameters", label="student parameters", origin="computed")
run.metric("teacher.train_s", teacher_info["train_s"], "s", label=f"teacher training ({TEACHER_EPOCHS} epochs), in this run")
device = run.torch_device  # training ran on the CPU (seconds); inference latency is measured on the run's device
teacher_on_device, student = copy.deepcopy(teacher).to(device), MLP(STUDENT_HIDDEN).eval().to(device)
for rows_n in (1, len(x_te)):
    x = x_te[:rows_n].to(device)
    with torch.no_grad():
        t_teacher = run.time(lambda: teacher_on_device(x)).median_s
        t_student = run.time(lambda: student(x)).median_s
    run.metric(f"latency.teacher.rows{rows_n}_us", t_teacher * 1e6, "us", label=f"teacher forward, {rows_n} rows")
    run.metric(f"latency.student.rows{rows_n}_us", t_student * 1e6, "us", label=f"student forward, {rows_n} rows")
    run.metric(f"latency.speedup.rows{rows_n}", t_teacher / t_student, "x", label=f"teacher time over student time, {rows_n} rows")
T_mid = 4.0 if 4.0 in temperatures else temperatures[-1]
run.metric("train_cost.distilled_over_alone", float(np.mean(cost["all_labels", f"distilled_T{int(T_mid)}"])) /
           float(np.mean(cost["all_labels", "alone"])), "x",
           label=f"distilled student's training time over the student alone (same epochs; teacher forward each step)")
run.save()
