;;; flow-bench.el --- The batch flow in Emacs, timed, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by bench/run.py with $FORJ_PYTHON and $FORJ_BENCH_ROOT (a project
;; holding big0.txt .. big7.txt of about 1.25 MB each, and a config
;; raising the output limits).  Prints two lines:
;;   render MS   median time from an 8-call read batch's results arriving
;;               to their tool-result blocks drawn in the buffer
;;   lag MS      the worst lateness of a 10 ms timer while a batch of
;;               8 x 1.25 MB results comes back and is drawn

;;; Code:

(require 'forj-tools)

(defun flow-bench--calls (n)
  "Text of N read_file calls on big0.txt .. bigN.txt."
  (mapconcat (lambda (i)
               (format "```tool-call\n{\"id\": \"c%d\", \"name\": \"read_file\", \"args\": {\"path\": \"big%d.txt\", \"max_bytes\": 2000000}}\n```\n" i i))
             (number-sequence 0 (1- n)) ""))

(let* ((forj-worker-python (getenv "FORJ_PYTHON"))
       (forj-tools-capacity-bytes 100000000)
       (root (getenv "FORJ_BENCH_ROOT"))
       (renders nil)
       (worst-lag 0))
  ;; Warm up: start the worker.
  (let ((ready nil))
    (forj-worker-ensure root (lambda (_) (setq ready t)))
    (while (not ready) (accept-process-output nil 0.05)))
  ;; Render time: time the drawing of results already received.
  (advice-add 'forj-tools--results :around
              (lambda (orig batch results)
                (let ((t0 (float-time)))
                  (funcall orig batch results)
                  (push (- (float-time) t0) renders))))
  (dotimes (_ 7)
    (with-temp-buffer
      (insert (flow-bench--calls 8))
      (let ((done nil))
        (forj-tools-run-region (point-min) (point-max) (lambda (_) (setq done t)) root)
        (while (not done) (accept-process-output nil 0.01)))))
  ;; Timer lag while results stream in and are drawn.
  (let* ((expected (+ (float-time) 0.01))
         (timer (run-at-time 0.01 0.01
                             (lambda ()
                               (let ((now (float-time)))
                                 (setq worst-lag (max worst-lag (- now expected)))
                                 (setq expected (+ now 0.01)))))))
    (with-temp-buffer
      (insert (flow-bench--calls 8))
      (let ((done nil))
        (forj-tools-run-region (point-min) (point-max) (lambda (_) (setq done t)) root)
        (while (not done) (accept-process-output nil 0.005))))
    (cancel-timer timer))
  (setq renders (sort renders #'<))
  (princ (format "render %.1f\nlag %.1f\n"
                 (* 1000 (nth (/ (length renders) 2) renders))
                 (* 1000 worst-lag)))
  (forj-worker-stop root))

;;; flow-bench.el ends here
