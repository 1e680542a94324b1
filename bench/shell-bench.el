;;; shell-bench.el --- run_shell output streaming into Emacs, timed, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by bench/run.py with $FORJ_PYTHON, $FORJ_BENCH_ROOT (an empty
;; project) and $FORJ_CONFIG (output limits raised).  Runs the shell
;; command in $FORJ_BENCH_CMD (default `yes | head -c 52428800') through
;; run_shell, approved programmatically, and prints:
;;   mbps MB/S   megabytes of output that reached the *forj-shell* buffer
;;               per second, from the call's start to its last chunk
;;   lag MS      the worst lateness of a 10 ms timer meanwhile
;;   bytes N     what the shell buffer received
;;   ref_mbps MB/S  the reference: Emacs running the same command itself
;;               (`make-process', a filter inserting each chunk at the
;;               end of a buffer), start to exit

;;; Code:

(require 'forj-tools)

(let* ((forj-worker-python (getenv "FORJ_PYTHON"))
       (root (getenv "FORJ_BENCH_ROOT"))
       (command (or (getenv "FORJ_BENCH_CMD") "yes | head -c 52428800"))
       (worst-lag 0)
       (started nil)
       (last-chunk nil)
       (received 0)
       (gc-before nil))
  (let ((ready nil))
    (forj-worker-ensure root (lambda (_) (setq ready t)))
    (while (not ready) (accept-process-output nil 0.05)))
  (advice-add 'forj-shell-append :after
              (lambda (_buffer _kind data)
                (setq received (+ received (if (stringp data)
                                               (string-bytes data)
                                             (- (forj-epc-output-end data)
                                                (forj-epc-output-start data))))
                      last-chunk (float-time))))
  (advice-add 'forj-review-open :override
              (lambda (items callback &rest _)
                (setq started (float-time))
                (funcall callback (mapcar (lambda (i) (plist-get i :id)) items) nil nil)))
  (setq gc-before (cons gcs-done gc-elapsed))
  (let* ((expected (+ (float-time) 0.01))
         (timer (run-at-time 0.01 0.01
                             (lambda ()
                               (let ((now (float-time)))
                                 (setq worst-lag (max worst-lag (- now expected)))
                                 (setq expected (+ now 0.01)))))))
    (with-temp-buffer
      (insert "```tool-call\n"
              (json-serialize `(:id "yes" :name "run_shell" :args (:cmd ,command)))
              "\n```\n")
      (let ((done nil))
        (forj-tools-run-region (point-min) (point-max) (lambda (_) (setq done t)) root)
        (while (not done) (accept-process-output nil 0.005))))
    (cancel-timer timer))
  (princ (format "mbps %.1f\nlag %.1f\nbytes %d\ngcs %d\ngc_ms %.0f\n"
                 (/ (/ received 1048576.0) (max 0.001 (- last-chunk started)))
                 (* 1000 worst-lag)
                 received
                 (- gcs-done (car gc-before))
                 (* 1000 (- gc-elapsed (cdr gc-before)))))
  ;; The reference: the same command run by Emacs itself.
  (setq gc-before (cons gcs-done gc-elapsed))
  (let* ((buffer (generate-new-buffer " *forj-bench-ref*"))
         (t0 (float-time))
         (process (make-process
                   :name "forj-bench-ref" :buffer buffer :connection-type 'pipe
                   :coding 'utf-8-unix :noquery t :sentinel #'ignore
                   :command (list shell-file-name shell-command-switch command)
                   :filter (lambda (proc data)
                             (with-current-buffer (process-buffer proc)
                               (goto-char (point-max))
                               (insert data))))))
    (while (process-live-p process) (accept-process-output process 0.05))
    (let ((elapsed (- (float-time) t0))
          (size (with-current-buffer buffer (buffer-size))))
      (princ (format "ref_mbps %.1f\nref_bytes %d\nref_gcs %d\nref_gc_ms %.0f\n"
                     (/ (/ size 1048576.0) elapsed) size
                     (- gcs-done (car gc-before))
                     (* 1000 (- gc-elapsed (cdr gc-before))))))
    (kill-buffer buffer))
  (when (get-buffer "*forj-shell: yes*")
    (with-current-buffer "*forj-shell: yes*" (princ (format "buffer %d\n" (buffer-size)))))
  (forj-worker-stop root))

;;; shell-bench.el ends here
