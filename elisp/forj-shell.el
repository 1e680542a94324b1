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
;; produced, stderr in its own face.
;;
;; The header line turns a spinner while the command runs and says how
;; it ended once it has: its exit code (or signal) and how long it
;; took.  The buffer ends with the same line and a link back to the
;; call in the conversation.  Only the last `forj-shell-visible-lines'
;; lines show while output streams in: the earlier ones stay in the
;; buffer behind one line that counts them, and
;; \\<forj-shell-mode-map>\\[forj-shell-toggle-all] shows them.  The
;; window follows the output unless it was scrolled up.  The model gets
;; the capped head and tail of the output in the call's result, the
;; record, whatever this buffer shows.
;;
;; The call's header line in the conversation links to the buffer,
;; which opens where `forj-display-shell' says.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)

(defface forj-shell-stderr
  '((t :inherit font-lock-warning-face))
  "Face for what a command wrote on stderr."
  :group 'forj)

(defface forj-shell-header
  '((t :inherit shadow))
  "Face for the first and last lines of a command's output buffer."
  :group 'forj)

(defface forj-shell-failed
  '((t :inherit error))
  "Face for the outcome of a command that failed or was stopped."
  :group 'forj)

(defface forj-shell-succeeded
  '((t :inherit success))
  "Face for the outcome of a command that succeeded."
  :group 'forj)

(defcustom forj-shell-max-bytes nil
  "Largest size of a `*forj-shell: ID*' buffer, or nil to keep everything.
Past it, the oldest output is removed from the buffer (the model's
result is unaffected)."
  :type '(choice (const :tag "Keep everything" nil) (natnum :tag "Bytes"))
  :group 'forj)

(defcustom forj-shell-visible-lines 50
  "How many of its last lines a command's output buffer shows, or nil for all.
The earlier lines stay in the buffer, hidden behind one line that
counts them; \\<forj-shell-mode-map>\\[forj-shell-toggle-all] in the \
buffer shows or hides them.
Hiding them keeps long outputs cheap to display; the model's result
is unaffected."
  :type '(choice (const :tag "Every line" nil) (natnum :tag "Lines"))
  :group 'forj)

(defcustom forj-display-shell
  '((display-buffer-reuse-window display-buffer-in-side-window)
    (side . bottom)
    (slot . 1)
    (window-height . 0.3))
  "Where a command's output buffer opens, as a `display-buffer' action.
The default is a window at the bottom of the frame, a third of its
height; \\<forj-shell-mode-map>\\[quit-window] in it closes the window \
again.
An entry of `display-buffer-alist' matching `*forj-shell: ' names
takes precedence."
  :type '(cons (choice (function :tag "Function")
                       (repeat :tag "Functions" function))
               (alist :tag "Action alist"))
  :group 'forj)

(defvar-local forj-shell--running nil
  "Non-nil while the command shown in this buffer runs.")

(defvar-local forj-shell--started nil
  "When the command of this buffer started, as a float time.")

(defvar-local forj-shell--ended nil
  "When the command of this buffer ended, as a float time, or nil.")

(defvar-local forj-shell--outcome nil
  "How the command ended: a plist (:ok :exit :signal :ms :error), or nil.")

(defvar-local forj-shell--origin nil
  "Marker at the command's call in the conversation, or nil.")

(defvar-local forj-shell--output-start nil
  "Marker: where the command's output starts (after the summary line).")

(defvar-local forj-shell--output-end nil
  "Marker: where the command's output ends (before the closing line).")

(defvar-local forj-shell--lines 0
  "How many line breaks the output holds.")

(defvar-local forj-shell--show-all nil
  "Non-nil when the user asked to see every line of the output.")

(defvar-local forj-shell--removed 0
  "How many characters of the oldest output `forj-shell-max-bytes' removed.")

(defvar-local forj-shell--toggle-key nil
  "The key of `forj-shell-toggle-all', as the fold's line shows it.
Looked up once per buffer, not once per chunk of output.")

(defvar-local forj-shell--fold nil
  "The overlay hiding all but the last lines of the output, or nil.")

(defvar forj-shell-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "f" #'forj-shell-toggle-all)
    (define-key map "c" #'forj-shell-visit-call)
    map)
  "Keymap of `forj-shell-mode'.")

(define-derived-mode forj-shell-mode special-mode "forj-shell"
  "Live output of a command run by a forj tool call.
The header line turns a spinner while the command runs, then says how
it ended (exit code, duration).  Only the last `forj-shell-visible-lines'
lines show by default.

\\{forj-shell-mode-map}"
  (setq buffer-undo-list t)
  (setq-local scroll-conservatively 101)
  (setq-local header-line-format '(:eval (forj-shell--header-line))))

;;; The spinner

(defconst forj-shell--spinner-frames ["⠋" "⠙" "⠹" "⠸" "⠼" "⠴" "⠦" "⠧" "⠇" "⠏"]
  "The frames of a running command's spinner.")

(defvar forj-shell--spinner-timer nil
  "The timer turning the spinners, while any command runs.")

(defun forj-shell--running-buffers ()
  "Return the live output buffers whose command is still running."
  (cl-remove-if-not (lambda (buffer) (buffer-local-value 'forj-shell--running buffer))
                    (buffer-list)))

(defun forj-shell--spinner-update ()
  "Start the spinner timer if a command is running, else stop it."
  (let ((running (forj-shell--running-buffers)))
    (cond ((and running (not forj-shell--spinner-timer))
           (setq forj-shell--spinner-timer (run-at-time 0.1 0.1 #'forj-shell--spinner-tick)))
          ((and (null running) forj-shell--spinner-timer)
           (cancel-timer forj-shell--spinner-timer)
           (setq forj-shell--spinner-timer nil)))))

(defun forj-shell--spinner-tick ()
  "Redraw the header line of every running command that is on screen."
  (let ((running (forj-shell--running-buffers)))
    (if (null running)
        (forj-shell--spinner-update)
      (dolist (buffer running)
        (when (get-buffer-window buffer t)
          (with-current-buffer buffer (force-mode-line-update)))))))

(defun forj-shell--spinner-frame ()
  "The spinner frame for now."
  (aref forj-shell--spinner-frames
        (mod (floor (* 10 (float-time))) (length forj-shell--spinner-frames))))

;;; Status

(defun forj-shell--seconds (seconds)
  "Format SECONDS for the closing line and the header line."
  (if (< seconds 60)
      (format "%.2f s" seconds)
    (format "%d min %02d s" (floor seconds 60) (mod (round seconds) 60))))

(defun forj-shell--duration ()
  "How long the command ran (or has run), in seconds.
The worker's own measure once its result is known, else Emacs's."
  (let ((ms (plist-get forj-shell--outcome :ms)))
    (cond ((numberp ms) (/ ms 1000.0))
          (forj-shell--started (- (or forj-shell--ended (float-time)) forj-shell--started))
          (t 0))))

(defun forj-shell--status ()
  "How the command ended, in words: mark, exit code or cause, duration."
  (let* ((outcome forj-shell--outcome)
         (ok (plist-get outcome :ok))
         (exit (plist-get outcome :exit))
         (signal (plist-get outcome :signal))
         (type (plist-get outcome :error))
         (cause (cond ((stringp signal) (format "killed by %s" signal))
                      ((integerp exit) (format "exit code %d" exit))
                      ((equal type "timeout-error") "timed out")
                      ((equal type "cancelled") "cancelled")
                      ((equal type "permission-error") "denied")
                      (type (format "failed (%s)" type))
                      (ok "finished")
                      (t "failed or stopped"))))
    (concat (propertize (if ok "✓" "✗") 'face (if ok 'forj-shell-succeeded 'forj-shell-failed))
            " " cause
            (format " · %s" (forj-shell--seconds (forj-shell--duration))))))

(defun forj-shell--header-line ()
  "Return the header line: a spinner while running, then how the command ended."
  (let ((hidden (and forj-shell--fold (overlay-buffer forj-shell--fold)
                     (overlay-get forj-shell--fold 'invisible))))
    (concat
     " "
     (if forj-shell--running
         (format "%s running · %s" (forj-shell--spinner-frame)
                 (forj-shell--seconds (forj-shell--duration)))
       (forj-shell--status))
     (if hidden
         (substitute-command-keys
          (format " · last %d lines shown, \\<forj-shell-mode-map>\\[forj-shell-toggle-all] shows all"
                  forj-shell-visible-lines))
       ""))))

(defun forj-shell--outcome-of (outcome previous)
  "The outcome plist for OUTCOME, merged over PREVIOUS.
OUTCOME is non-nil or nil (the command succeeded or not, as the
worker's event says), or the call's result plist."
  (if (and (consp outcome) (keywordp (car outcome)))
      (let* ((ok (eq (plist-get outcome :ok) t))
             (err (plist-get outcome :error))
             (fields (if ok (plist-get outcome :result) (plist-get err :details)))
             (fields (and (consp fields) (keywordp (car fields)) fields)))
        (list :ok ok
              :exit (plist-get fields :exit_code)
              :signal (plist-get fields :signal)
              :ms (plist-get fields :duration_ms)
              :error (and (not ok) (plist-get err :type))))
    (plist-put (copy-sequence previous) :ok (and outcome t))))

;;; The buffer

(defun forj-shell-buffer (id summary &optional origin)
  "Start the output buffer of call ID, headed by SUMMARY; return it.
ORIGIN, a marker at the call in the conversation, is where the link
at the end of the buffer leads.  A buffer of that name still showing
a running command is kept, and a new one is made beside it."
  (let* ((name (format "*forj-shell: %s*" id))
         (old (get-buffer name))
         (buffer (if (and old (buffer-local-value 'forj-shell--running old))
                     (generate-new-buffer name)
                   (get-buffer-create name))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'forj-shell-mode) (forj-shell-mode))
      (let ((inhibit-read-only t))
        (when forj-shell--fold (delete-overlay forj-shell--fold))
        (erase-buffer)
        (insert (propertize (format "%s\n" (forj-shell--summary summary)) 'face 'forj-shell-header)))
      (setq forj-shell--running t
            forj-shell--started (float-time)
            forj-shell--ended nil
            forj-shell--outcome nil
            forj-shell--origin origin
            forj-shell--lines 0
            forj-shell--removed 0
            forj-shell--fold nil
            forj-shell--output-start (copy-marker (point-max))
            forj-shell--output-end (copy-marker (point-max) t)))
    (forj-shell--spinner-update)
    buffer))

(defun forj-shell--summary (summary)
  "Return SUMMARY without the spinner frame of a running call's header.
The header line turns its own."
  (let ((text (copy-sequence summary))
        (start 0))
    (while (setq start (text-property-any start (length text) 'forj-tools-spinner t text))
      (setq text (concat (substring text 0 start)
                         (substring text (or (next-single-property-change start 'forj-tools-spinner text)
                                             (length text))))))
    (string-trim-left text)))

(defun forj-shell-append (buffer kind data)
  "Append DATA, output of KIND (\"stdout\" or \"stderr\"), to BUFFER.
DATA is a string or a `forj-epc-output' (bytes of UTF-8 in another
buffer, copied across without making a string of them).  Windows
showing the end of BUFFER keep showing it."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let* ((following (cl-loop for window in (get-buffer-window-list buffer nil t)
                                 when (>= (window-point window) forj-shell--output-end)
                                 collect window))
             (at-end (>= (point) forj-shell--output-end))
             (inhibit-read-only t)
             (inhibit-modification-hooks t))
        (save-excursion
          (goto-char forj-shell--output-end)
          (let ((start (point)))
            (if (stringp data)
                (insert data)
              (forj-shell--insert-output data))
            (when (equal kind "stderr")
              (put-text-property start (point) 'face 'forj-shell-stderr))
            ;; Counted in the buffer, in C: a Lisp loop over every
            ;; character of every chunk was most of the time output took.
            (setq forj-shell--lines (+ forj-shell--lines (forj-shell--newlines start (point)))))
          (when (and forj-shell-max-bytes (> (buffer-size) forj-shell-max-bytes))
            (forj-shell--trim)))
        (forj-shell--update-fold)
        (when at-end (goto-char forj-shell--output-end))
        (dolist (window following)
          (set-window-point window forj-shell--output-end))))))

(defun forj-shell--insert-output (output)
  "Insert OUTPUT, a `forj-epc-output', at point, decoded from UTF-8.
Buffer to buffer: the bytes never become a string (a string per chunk
is garbage the size of all the output, and collecting it was most of
what streaming cost Emacs)."
  (let ((start (point))
        (source (forj-epc-output-buffer output))
        (from (forj-epc-output-start output))
        (to (forj-epc-output-end output)))
    (insert-buffer-substring source from to)
    (unless (forj-epc-output-ascii output)
      ;; Not known to be ASCII: bytes past 127 came in as raw bytes; make
      ;; characters of them.
      (decode-coding-region start (point) 'utf-8-unix))))

(defun forj-shell--newlines (start end)
  "Count the line breaks in the text between START and END (START <= END)."
  (let ((lines (count-lines start end)))
    (if (and (< start end) (/= (char-before end) ?\n)) (1- lines) lines)))

(defun forj-shell--trim ()
  "Remove the oldest output, down to three quarters of `forj-shell-max-bytes'.
One line after the summary counts what was removed so far."
  (let ((from (marker-position forj-shell--output-start))
        (to (max forj-shell--output-start
                 (- forj-shell--output-end (/ (* 3 forj-shell-max-bytes) 4)))))
    (goto-char to)
    (forward-line 1)
    (setq to (min (point) forj-shell--output-end))
    (when (> to from)
      (setq forj-shell--removed (+ forj-shell--removed (- to from)))
      (delete-region from to)
      ;; The line counting earlier removals, if any, gives way to the new count.
      (let ((note (save-excursion (goto-char (point-min)) (line-beginning-position 2))))
        (delete-region note from)
        (goto-char note))
      (insert (propertize (format "[... %d characters of older output removed ...]\n"
                                  forj-shell--removed)
                          'face 'forj-shell-header))
      (set-marker forj-shell--output-start (point))
      (setq forj-shell--lines (count-lines forj-shell--output-start forj-shell--output-end)))))

;;; Only the last lines

(defun forj-shell--update-fold ()
  "Hide all but the last `forj-shell-visible-lines' lines of output, or none."
  (let ((limit forj-shell-visible-lines))
    (if (or forj-shell--show-all (null limit))
        (when forj-shell--fold
          (delete-overlay forj-shell--fold)
          (setq forj-shell--fold nil))
      (let* ((shown-from (save-excursion
                           (goto-char forj-shell--output-end)
                           (if (bolp)
                               (forward-line (- limit))
                             (forward-line (- (1- limit))))
                           (max (point) forj-shell--output-start)))
             (hidden (- forj-shell--lines
                        (save-excursion (goto-char forj-shell--output-end)
                                        (if (bolp) limit (max 0 (1- limit)))))))
        (if (<= shown-from forj-shell--output-start)
            (when forj-shell--fold (delete-overlay forj-shell--fold))
          (unless (and forj-shell--fold (overlay-buffer forj-shell--fold))
            (setq forj-shell--fold (make-overlay forj-shell--output-start shown-from nil nil nil))
            (overlay-put forj-shell--fold 'invisible t)
            (overlay-put forj-shell--fold 'forj-shell-fold t))
          (move-overlay forj-shell--fold forj-shell--output-start shown-from)
          (overlay-put forj-shell--fold 'before-string
                       (propertize
                        (format "⟨%d earlier line%s hidden: %s shows them⟩\n"
                                hidden (if (= hidden 1) "" "s")
                                (or forj-shell--toggle-key
                                    (setq forj-shell--toggle-key
                                          (substitute-command-keys
                                           "\\<forj-shell-mode-map>\\[forj-shell-toggle-all]"))))
                        'face 'forj-shell-header)))))))

(defun forj-shell-toggle-all ()
  "Show every line of the output, or again only the last ones.
See `forj-shell-visible-lines'."
  (interactive)
  (unless (derived-mode-p 'forj-shell-mode) (user-error "Not in a command's output buffer"))
  (setq forj-shell--show-all (not forj-shell--show-all))
  (forj-shell--update-fold)
  (force-mode-line-update)
  (message (if forj-shell--show-all
               "forj: showing every line of the output"
             (format "forj: showing the last %d lines" forj-shell-visible-lines))))

;;; The end

(defun forj-shell-finish (buffer outcome)
  "Mark the command of BUFFER as ended and say how, at its end and in its header.
OUTCOME is non-nil if the command succeeded, nil if it failed or was
stopped; or the call's result plist, which adds the exit code and the
duration the worker measured.  The spinner stops."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when forj-shell--running
        (setq forj-shell--running nil
              forj-shell--ended (float-time)))
      (setq forj-shell--outcome (forj-shell--outcome-of outcome forj-shell--outcome))
      (forj-shell--draw-end)
      (force-mode-line-update))
    (forj-shell--spinner-update)))

(defun forj-shell--draw-end ()
  "Write the closing line: how the command ended, and a link to its call."
  (let ((inhibit-read-only t)
        (following (cl-loop for window in (get-buffer-window-list (current-buffer) nil t)
                            when (>= (window-point window) forj-shell--output-end)
                            collect window)))
    (save-excursion
      (delete-region forj-shell--output-end (point-max))
      (goto-char (point-max))
      (let ((start (point)))
        (unless (bolp) (insert "\n"))
        (insert (forj-shell--status))
        (when (and (markerp forj-shell--origin) (buffer-live-p (marker-buffer forj-shell--origin)))
          (insert " · ")
          (insert-text-button "back to the call"
                              'action (lambda (_) (forj-shell-visit-call))
                              'follow-link t
                              'help-echo (format "Show this call in %s"
                                                 (buffer-name (marker-buffer forj-shell--origin)))))
        (insert "\n")
        (add-face-text-property start (point) 'forj-shell-header t)
        ;; The output's own markers stay before the closing line.
        (set-marker forj-shell--output-end start)))
    (dolist (window following)
      (set-window-point window (point-max)))))

(defun forj-shell-visit-call ()
  "Show the tool call of this output buffer, in its conversation."
  (interactive)
  (let ((origin forj-shell--origin))
    (unless (and (markerp origin) (buffer-live-p (marker-buffer origin)))
      (user-error "The conversation of this command is gone"))
    (pop-to-buffer (marker-buffer origin))
    (goto-char origin)))

(defun forj-shell-display (buffer)
  "Show and select BUFFER, a command's output, where `forj-display-shell' puts it."
  (pop-to-buffer buffer forj-display-shell))

(provide 'forj-shell)
;;; forj-shell.el ends here
