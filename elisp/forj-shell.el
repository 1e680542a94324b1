;;; forj-shell.el --- Live output of the commands a batch runs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; While `run_shell' or `run_tests' runs, the worker streams the
;; command's stdout and stderr as events; they land here, in
;; `*forj-shell: ID*' (ID is the call's id), in the order they were
;; produced, stderr in its own face.  The buffer follows the output
;; unless its window was scrolled up; it keeps everything it received,
;; while the model gets the capped head and tail in the final result
;; (the record).  The call's header line in the conversation links to
;; the buffer.

;;; Code:

(require 'cl-lib)
(require 'forj)

(defface forj-shell-stderr
  '((t :inherit font-lock-warning-face))
  "Face for what a command wrote on stderr."
  :group 'forj)

(defface forj-shell-header
  '((t :inherit shadow))
  "Face for the first and last lines of a command's output buffer."
  :group 'forj)

(defcustom forj-shell-max-bytes nil
  "Largest size of a `*forj-shell: ID*' buffer, or nil to keep everything.
Past it, the oldest output is removed from the buffer (the model's
result is unaffected)."
  :type '(choice (const :tag "Keep everything" nil) (natnum :tag "Bytes"))
  :group 'forj)

(defvar-local forj-shell--running nil
  "Non-nil while the command shown in this buffer runs.")

(define-derived-mode forj-shell-mode special-mode "forj-shell"
  "Live output of a command run by a forj tool call."
  (setq buffer-undo-list t)
  (setq-local scroll-conservatively 101))

(defun forj-shell-buffer (id summary)
  "Start the output buffer of call ID, headed by SUMMARY; return it.
A buffer of that name still showing a running command is kept, and a
new one is made beside it."
  (let* ((name (format "*forj-shell: %s*" id))
         (old (get-buffer name))
         (buffer (if (and old (buffer-local-value 'forj-shell--running old))
                     (generate-new-buffer name)
                   (get-buffer-create name))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'forj-shell-mode) (forj-shell-mode))
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (propertize (format "%s\n" summary) 'face 'forj-shell-header)))
      (setq forj-shell--running t))
    buffer))

(defun forj-shell-append (buffer kind data)
  "Append DATA, output of KIND (\"stdout\" or \"stderr\"), to BUFFER.
Windows showing the end of BUFFER keep showing it."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let* ((end (point-max))
             (following (cl-loop for window in (get-buffer-window-list buffer nil t)
                                 when (= (window-point window) end) collect window))
             (inhibit-read-only t)
             (inhibit-modification-hooks t))
        (save-excursion
          (goto-char end)
          (insert (if (equal kind "stderr") (propertize data 'face 'forj-shell-stderr) data))
          (when (and forj-shell-max-bytes (> (buffer-size) forj-shell-max-bytes))
            (forj-shell--trim)))
        (when (= (point) end) (goto-char (point-max)))
        (dolist (window following)
          (set-window-point window (point-max)))))))

(defun forj-shell--trim ()
  "Remove the oldest output, down to three quarters of `forj-shell-max-bytes'."
  (goto-char (point-min))
  (forward-line 1)                      ; keep the summary line
  (let ((from (point))
        (to (max (point) (- (point-max) (/ (* 3 forj-shell-max-bytes) 4)))))
    (goto-char to)
    (forward-line 1)
    (setq to (min (point) (point-max)))
    (when (> to from)
      (let ((removed (- to from)))
        (delete-region from to)
        (goto-char from)
        (insert (propertize (format "[... %d characters of older output removed ...]\n" removed)
                            'face 'forj-shell-header))))))

(defun forj-shell-finish (buffer ok)
  "Mark the command of BUFFER as ended; OK is non-nil if it succeeded."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq forj-shell--running nil)
      (forj-shell-append buffer "stdout"
                         (propertize (format "%s[%s]\n"
                                             (if (save-excursion (goto-char (point-max)) (bolp)) "" "\n")
                                             (if ok "finished" "failed or stopped"))
                                     'face 'forj-shell-header)))))

(provide 'forj-shell)
;;; forj-shell.el ends here
