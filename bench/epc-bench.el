;;; epc-bench.el --- Round trips through forj-epc.el, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by bench/run.py: starts the worker for the directory in
;; $FORJ_BENCH_ROOT with the Python in $FORJ_PYTHON, then prints the
;; median no-op round trip (`ping') in milliseconds on one line.

;;; Code:

(require 'forj-worker)

(let* ((forj-worker-python (getenv "FORJ_PYTHON"))
       (root (getenv "FORJ_BENCH_ROOT"))
       (worker nil)
       (samples nil))
  (forj-worker-ensure root (lambda (w) (setq worker w))
                      (lambda (e) (error "Worker failed: %S" e)))
  (while (not worker) (accept-process-output nil 0.05))
  (let ((conn (forj-worker-connection worker)))
    (dotimes (i 2200)
      (let ((t0 (float-time)))
        (forj-epc-call-sync conn "ping" nil)
        (when (>= i 200) (push (- (float-time) t0) samples)))))
  (setq samples (sort samples #'<))
  (princ (format "%.4f\n" (* 1000 (nth (/ (length samples) 2) samples))))
  (forj-worker-stop root))

;;; epc-bench.el ends here
